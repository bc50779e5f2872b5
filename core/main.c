/*
 * main.c - the mgrun executable: everything lives in libmg so tests and
 * embedders can drive the same code.
 */
int mg_main(int argc, char **argv);

int main(int argc, char **argv)
{
	return mg_main(argc, argv);
}
