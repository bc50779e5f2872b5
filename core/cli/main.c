/*
 * main.c - the mgrun executable: the command line (cli.c) and the analysis
 * library are linked in; training, sessions and plugins live in libmg.
 */
int mg_main(int argc, char **argv);

int main(int argc, char **argv)
{
	return mg_main(argc, argv);
}
