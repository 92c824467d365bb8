/* gai: resolves each argument with the C library's getaddrinfo (or gethostbyaddr) and
 * prints one line per query, for dnsserver's real-client test. Built with gcc (glibc) and,
 * when present, musl-gcc (musl).
 *
 *   gai 0:NAME 4:NAME 6:NAME p:IP ...
 *
 * 0 = AF_UNSPEC, 4 = AF_INET, 6 = AF_INET6, p = reverse lookup. Output, tab-separated:
 *   F NAME ok ADDR,ADDR,...
 *   F NAME err KIND MESSAGE        KIND: notfound (EAI_NONAME / EAI_NODATA), again, other
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static const char *kind(int rc) {
	switch (rc) {
	case EAI_NONAME:
#ifdef EAI_NODATA
	case EAI_NODATA:
#endif
		return "notfound";
	case EAI_AGAIN:
		return "again";
	default:
		return "other";
	}
}

static void forward(char fam, const char *name) {
	struct addrinfo hints, *res, *ai;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = fam == '4' ? AF_INET : fam == '6' ? AF_INET6 : AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(name, NULL, &hints, &res);
	if (rc != 0) {
		printf("%c\t%s\terr\t%s\t%s\n", fam, name, kind(rc), gai_strerror(rc));
		return;
	}
	printf("%c\t%s\tok\t", fam, name);
	for (ai = res; ai; ai = ai->ai_next) {
		char buf[INET6_ADDRSTRLEN];
		const void *a = ai->ai_family == AF_INET
			? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
			: (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
		inet_ntop(ai->ai_family, a, buf, sizeof buf);
		printf("%s%s", ai == res ? "" : ",", buf);
	}
	printf("\n");
	freeaddrinfo(res);
}

static void reverse(const char *ip) {
	struct sockaddr_storage ss;
	socklen_t len;
	memset(&ss, 0, sizeof ss);
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		len = sizeof *s4;
	} else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		len = sizeof *s6;
	} else {
		printf("p\t%s\terr\tother\tnot an IP address\n", ip);
		return;
	}
	char host[NI_MAXHOST];
	int rc = getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, NULL, 0, NI_NAMEREQD);
	if (rc != 0) {
		printf("p\t%s\terr\t%s\t%s\n", ip, kind(rc), gai_strerror(rc));
		return;
	}
	printf("p\t%s\tok\t%s\n", ip, host);
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		const char *q = argv[i];
		if (strlen(q) < 3 || q[1] != ':') {
			printf("?\t%s\terr\tother\twant F:NAME\n", q);
			continue;
		}
		if (q[0] == 'p')
			reverse(q + 2);
		else
			forward(q[0], q + 2);
		fflush(stdout);
	}
	return 0;
}
