/*
 * rendezvous.c - rank 0's small blob (the NCCL unique id) to every other
 * rank over TCP, before any communicator exists to carry it.
 *
 * Rank 0 listens (on the socket the local launcher handed it, or on
 * MG_MASTER_PORT on all interfaces), every other rank connects to
 * MG_MASTER_ADDR:MG_MASTER_PORT and says hello (magic, rank, world, blob
 * size). Once all world-1 hellos agree, rank 0 answers each with the
 * blob; on any disagreement it answers "rejected", so every rank fails
 * with a message instead of hanging. Each step is bounded by timeout_s.
 *
 * Wire format, big-endian: hello = magic u32, rank u32, world u32,
 * size u64; reply = magic u32, status u32 (0 ok, 1 rejected), size u64,
 * then the blob when ok.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

#define RDV_MAGIC 0x4d475256u /* "MGRV" */
#define HELLO_LEN 20
#define REPLY_LEN 16
#define RDV_OK 0
#define RDV_REJECTED 1
#define RETRY_S 0.1	  /* between connection attempts */
#define HELLO_WAIT_S 10.0 /* for a connected peer's hello */
#define CLOSE_WAIT_S 5.0  /* for the peers to close after the blob */
#define XFER_EOF (-2)	  /* xfer(): the other side closed */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds left until `end` for poll(), rounded up; 0 when past. */
static int ms_left(double end)
{
	double left = end - now_s();

	if (left <= 0)
		return 0;
	if (left > INT_MAX / 1000)
		return INT_MAX;
	return (int)(left * 1000.0) + 1;
}

static void put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const unsigned char *p)
{
	return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

/*
 * Send or receive exactly n bytes on a non-blocking socket before `end`
 * (short transfers and EINTR resumed). Returns 0; XFER_EOF when the
 * peer closed first; -1 with errno (ETIMEDOUT past the deadline).
 */
static int xfer(int fd, void *buf, size_t n, bool sending, double end)
{
	char *p = buf;

	while (n) {
		ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL)
				    : recv(fd, p, n, 0);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k == 0)
			return XFER_EOF;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		struct pollfd pfd = {.fd = fd,
				     .events = sending ? POLLOUT : POLLIN};
		int ms = ms_left(end);
		if (ms == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
			return -1;
	}
	return 0;
}

static const char *xfer_error(int r)
{
	return r == XFER_EOF ? "connection closed by the other side"
			     : strerror(errno);
}

/* The first of two variables that is set, and which one it was. */
static const char *getenv2(const char *a, const char *b, const char **which)
{
	const char *v = getenv(a);

	*which = a;
	if (!v) {
		v = getenv(b);
		*which = b;
	}
	return v;
}

/* MG_MASTER_PORT (or MASTER_PORT) as a TCP port. Returns the port, 0
 * when neither is set, -1 (error set) when malformed. */
static int read_port(const char **which, const char **text)
{
	char *end;
	long v;

	*text = getenv2(MG_ENV_MASTER_PORT, "MASTER_PORT", which);
	if (!*text)
		return 0;
	errno = 0;
	v = strtol(*text, &end, 10);
	if (errno || end == *text || *end || v < 1 || v > 65535)
		return mg_error("rendezvous: %s='%s' is not a TCP port "
				"(1-65535)",
				*which, *text);
	return (int)v;
}

/* "host:port", with brackets around an IPv6 literal. */
static void host_port(char *out, size_t len, const char *host, const char *port)
{
	snprintf(out, len, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

static void peer_name(const struct sockaddr_storage *a, socklen_t al, char *out,
		      size_t len)
{
	char h[NI_MAXHOST], s[NI_MAXSERV];

	if (getnameinfo((const struct sockaddr *)a, al, h, sizeof h, s,
			sizeof s, NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(out, len, "an unknown address");
	else
		host_port(out, len, h, s);
}

/* Rank 0's listener when it was not inherited: port on every interface
 * (IPv6 and IPv4 together where the host has IPv6). */
static int listen_any(int port, const char *var, int backlog)
{
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
				  .sin6_port = htons((uint16_t)port),
				  .sin6_addr = IN6ADDR_ANY_INIT};
	struct sockaddr_in a4 = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_ANY)};
	int one = 1, zero = 0, e;
	int fd =
		socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd >= 0) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (!bind(fd, (struct sockaddr *)&a6, sizeof a6))
			goto bound;
		e = errno;
		close(fd);
		fd = -1;
		if (e == EADDRINUSE || e == EACCES)
			goto fail_errno;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		e = errno;
		goto fail_errno;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a4, sizeof a4)) {
		e = errno;
		close(fd);
		goto fail_errno;
	}
bound:
	if (listen(fd, backlog)) {
		e = errno;
		close(fd);
		goto fail_errno;
	}
	return fd;
fail_errno:
	return mg_error("rendezvous: rank 0 cannot listen on port %d (%s): "
			"%s",
			port, var, strerror(e));
}

/* The listener the local launcher handed rank 0 in MG_RENDEZVOUS_FD. */
static int inherited_listener(const char *text)
{
	char *end;
	long v;
	int acc = 0;
	socklen_t al = sizeof acc;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < 0 || v > INT_MAX)
		return mg_error("rendezvous: %s='%s' is not a file descriptor",
				MG_ENV_RENDEZVOUS_FD, text);
	if (getsockopt((int)v, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al))
		return mg_error("rendezvous: %s=%ld is not a listening socket "
				"(%s)",
				MG_ENV_RENDEZVOUS_FD, v, strerror(errno));
	if (!acc)
		return mg_error("rendezvous: %s=%ld is not a listening socket",
				MG_ENV_RENDEZVOUS_FD, v);
	/* Ours alone from now on: not inherited by programs rank 0 runs. */
	if (fcntl((int)v, F_SETFD, FD_CLOEXEC) ||
	    fcntl((int)v, F_SETFL, fcntl((int)v, F_GETFL) | O_NONBLOCK))
		return mg_error("rendezvous: %s=%ld: %s", MG_ENV_RENDEZVOUS_FD,
				v, strerror(errno));
	return (int)v;
}

/* Tell a connected peer that the rendezvous failed (best effort: it
 * then reports that rank 0 rejected it instead of timing out). */
static void send_reject(int fd, double end)
{
	unsigned char reply[REPLY_LEN];

	put_u32(reply, RDV_MAGIC);
	put_u32(reply + 4, RDV_REJECTED);
	put_u64(reply + 8, 0);
	xfer(fd, reply, sizeof reply, true, end);
}

/* "2, 5, 7": the ranks that did not connect (the first few). */
static void missing_ranks(const int *peers, int world, char *out, size_t len)
{
	size_t off = 0;
	int shown = 0;

	out[0] = 0;
	for (int r = 1; r < world && off < len; r++) {
		if (peers[r - 1] >= 0)
			continue;
		if (shown == 8) {
			snprintf(out + off, len - off, ", ...");
			break;
		}
		off += (size_t)snprintf(out + off, len - off, "%s%d",
					shown ? ", " : "", r);
		shown++;
	}
}

/*
 * Read one connected peer's hello and check it against this job.
 * Returns its rank (> 0); 0 when the connection is not an mgrun rank
 * (ignored with a warning); -1 with the error set on a mismatch.
 */
static int check_hello(int fd, const char *who, const struct mg_dist_env *e,
		       size_t n, const int *peers, double end)
{
	unsigned char h[HELLO_LEN];
	double hello_end = now_s() + HELLO_WAIT_S;
	int r = xfer(fd, h, sizeof h, false, hello_end < end ? hello_end : end);

	if (r || get_u32(h) != RDV_MAGIC) {
		mg_warn("rendezvous: ignoring a connection from %s: %s", who,
			r ? xfer_error(r) : "not an mgrun rank");
		return 0;
	}
	uint32_t rank = get_u32(h + 4), world = get_u32(h + 8);
	uint64_t size = get_u64(h + 12);
	if (world != (uint32_t)e->world)
		return mg_error(
			"rendezvous: rank %u (from %s) says the job has "
			"%u ranks, rank 0 has %d",
			rank, who, world, e->world);
	if (rank < 1 || rank >= world)
		return mg_error("rendezvous: a peer at %s says it is rank %u "
				"of %u",
				who, rank, world);
	if (size != (uint64_t)n)
		return mg_error("rendezvous: rank %u (from %s) expects %llu "
				"bytes, rank 0 sends %zu",
				rank, who, (unsigned long long)size, n);
	if (peers[rank - 1] >= 0)
		return mg_error("rendezvous: two peers say they are rank %u "
				"(the second from %s)",
				rank, who);
	return (int)rank;
}

/* Rank 0: collect world-1 hellos, then send each peer the blob. */
static int serve(const struct mg_dist_env *e, const void *blob, size_t n,
		 double timeout_s, double end)
{
	const char *fd_text = getenv(MG_ENV_RENDEZVOUS_FD);
	const char *var, *text;
	int np = e->world - 1, got = 0, lfd, rc = -1;
	int *peers;

	if (fd_text) {
		lfd = inherited_listener(fd_text);
	} else {
		int port = read_port(&var, &text);
		if (port < 0)
			return -1;
		if (port == 0)
			return mg_error("rendezvous: rank 0 of %d needs %s (or "
					"MASTER_PORT) to listen on",
					e->world, MG_ENV_MASTER_PORT);
		lfd = listen_any(port, var, np);
	}
	if (lfd < 0)
		return -1;
	peers = malloc((size_t)np * sizeof *peers);
	if (!peers) {
		close(lfd);
		return mg_error("rendezvous: out of memory");
	}
	for (int i = 0; i < np; i++)
		peers[i] = -1;

	while (got < np) {
		struct pollfd pfd = {.fd = lfd, .events = POLLIN};
		struct sockaddr_storage a;
		socklen_t al = sizeof a;
		char who[NI_MAXHOST + NI_MAXSERV + 4];
		int ms = ms_left(end), fd, r;

		if (ms == 0) {
			char miss[128];
			missing_ranks(peers, e->world, miss, sizeof miss);
			mg_error("rendezvous: rank 0 heard from %d of the %d "
				 "other ranks within %g s (missing: %s)",
				 got, np, timeout_s, miss);
			goto out;
		}
		if (poll(&pfd, 1, ms) <= 0)
			continue; /* EINTR, or the deadline (checked above) */
		fd = accept4(lfd, (struct sockaddr *)&a, &al,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN ||
			    errno == ECONNABORTED)
				continue;
			mg_error("rendezvous: accept: %s", strerror(errno));
			goto out;
		}
		peer_name(&a, al, who, sizeof who);
		r = check_hello(fd, who, e, n, peers, end);
		if (r < 0) {
			send_reject(fd, now_s() + 1.0);
			close(fd);
			goto out;
		}
		if (r == 0) {
			close(fd);
			continue;
		}
		peers[r - 1] = fd;
		got++;
	}
	/* Nobody else may join now; a later rendezvous listens anew on
	 * the same port. */
	close(lfd);
	lfd = -1;

	unsigned char reply[REPLY_LEN];
	put_u32(reply, RDV_MAGIC);
	put_u32(reply + 4, RDV_OK);
	put_u64(reply + 8, n);
	for (int i = 0; i < np; i++) {
		int r = xfer(peers[i], reply, sizeof reply, true, end);
		if (!r && n)
			r = xfer(peers[i], (void *)blob, n, true, end);
		if (r) {
			mg_error("rendezvous: sending to rank %d: %s", i + 1,
				 xfer_error(r));
			goto out;
		}
	}
	/* Let each peer close first: its end keeps the TIME_WAIT, so the
	 * port is free for the next rendezvous at once. Bounded, and a
	 * peer that does not close is no error: it has the blob. */
	double close_end = now_s() + CLOSE_WAIT_S;
	if (close_end > end)
		close_end = end;
	for (int i = 0; i < np; i++) {
		char c;
		xfer(peers[i], &c, 1, false, close_end);
	}
	rc = 0;
out:
	for (int i = 0; i < np; i++) {
		if (peers[i] < 0)
			continue;
		if (rc)
			send_reject(peers[i], now_s() + 1.0);
		close(peers[i]);
	}
	if (lfd >= 0)
		close(lfd);
	/* The inherited socket is closed: forget its number. */
	if (fd_text)
		unsetenv(MG_ENV_RENDEZVOUS_FD);
	free(peers);
	return rc;
}

/*
 * One attempt to connect to host:port, trying each address it resolves
 * to, each bounded by `end`. Returns the connected (non-blocking)
 * socket, or -1 with why in err.
 */
static int try_connect(const char *host, const char *port, double end,
		       char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	int g = getaddrinfo(host, port, &hints, &res), fd = -1;

	if (g) {
		snprintf(err, errlen, "%s",
			 g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		int soerr = 0;
		socklen_t sl = sizeof soerr;

		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			snprintf(err, errlen, "%s", strerror(errno));
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS || errno == EINTR) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			int pr;
			do {
				pr = poll(&pfd, 1, ms_left(end));
			} while (pr < 0 && errno == EINTR);
			if (pr == 0)
				soerr = ETIMEDOUT;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr,
					    &sl))
				soerr = errno;
			if (!soerr)
				break;
		} else {
			soerr = errno;
		}
		snprintf(err, errlen, "%s", strerror(soerr));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

/* Any rank but 0: connect (retrying until the deadline), say hello,
 * receive the blob. */
static int join(const struct mg_dist_env *e, void *blob, size_t n,
		double timeout_s, double end)
{
	const char *avar, *pvar, *host, *port_text;
	char where[NI_MAXHOST + NI_MAXSERV + 4], err[256] = "no attempt";
	unsigned char hello[HELLO_LEN], reply[REPLY_LEN];
	int fd, r;

	host = getenv2(MG_ENV_MASTER_ADDR, "MASTER_ADDR", &avar);
	r = read_port(&pvar, &port_text);
	if (r < 0)
		return -1;
	if (!host || !*host || r == 0)
		return mg_error("rendezvous: rank %d of %d needs %s and %s (or "
				"MASTER_ADDR and MASTER_PORT) to find rank 0",
				e->rank, e->world, MG_ENV_MASTER_ADDR,
				MG_ENV_MASTER_PORT);
	host_port(where, sizeof where, host, port_text);
	for (;;) {
		fd = try_connect(host, port_text, end, err, sizeof err);
		if (fd >= 0)
			break;
		double left = end - now_s();
		if (left <= 0)
			return mg_error("rendezvous: could not reach rank 0 at "
					"%s within %g s (set %s/%s); last "
					"attempt: %s",
					where, timeout_s, MG_ENV_MASTER_ADDR,
					MG_ENV_MASTER_PORT, err);
		double pause = left < RETRY_S ? left : RETRY_S;
		struct timespec ts = {0, (long)(pause * 1e9)};
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}

	put_u32(hello, RDV_MAGIC);
	put_u32(hello + 4, (uint32_t)e->rank);
	put_u32(hello + 8, (uint32_t)e->world);
	put_u64(hello + 12, n);
	r = xfer(fd, hello, sizeof hello, true, end);
	if (!r)
		r = xfer(fd, reply, sizeof reply, false, end);
	if (r) {
		if (r < 0 && errno == ETIMEDOUT)
			mg_error("rendezvous: rank 0 at %s did not answer "
				 "within %g s (are all %d ranks running?)",
				 where, timeout_s, e->world);
		else
			mg_error("rendezvous: rank 0 at %s: %s", where,
				 xfer_error(r));
		goto fail;
	}
	if (get_u32(reply) != RDV_MAGIC) {
		mg_error("rendezvous: %s is not an mgrun rank 0 (check %s/%s)",
			 where, avar, pvar);
		goto fail;
	}
	if (get_u32(reply + 4) != RDV_OK) {
		mg_error("rendezvous: rank 0 at %s rejected rank %d (it "
			 "disagrees on the world size %d or the blob size "
			 "%zu; see rank 0's error)",
			 where, e->rank, e->world, n);
		goto fail;
	}
	if (get_u64(reply + 8) != (uint64_t)n) {
		mg_error("rendezvous: rank 0 at %s sends %llu bytes, rank %d "
			 "expects %zu",
			 where, (unsigned long long)get_u64(reply + 8), e->rank,
			 n);
		goto fail;
	}
	r = n ? xfer(fd, blob, n, false, end) : 0;
	if (r) {
		mg_error("rendezvous: receiving from rank 0 at %s: %s", where,
			 r < 0 && errno == ETIMEDOUT ? "timed out"
						     : xfer_error(r));
		goto fail;
	}
	close(fd);
	return 0;
fail:
	close(fd);
	return -1;
}

int mg_rendezvous_bcast(const struct mg_dist_env *e, void *blob, size_t n,
			double timeout_s)
{
	double end;

	if (e->world <= 1)
		return 0;
	if (e->rank < 0 || e->rank >= e->world)
		return mg_error("rendezvous: rank %d is not in a job of %d",
				e->rank, e->world);
	if (n && !blob)
		return mg_error("rendezvous: no buffer for %zu bytes", n);
	if (!(timeout_s > 0))
		return mg_error("rendezvous: timeout %g s is not positive",
				timeout_s);
	end = now_s() + timeout_s;
	return e->rank == 0 ? serve(e, blob, n, timeout_s, end)
			    : join(e, blob, n, timeout_s, end);
}
