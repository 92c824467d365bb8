"""Resolves each argument with Python's socket module (the C library's getaddrinfo and
getnameinfo) for dnsserver's real-client test; same arguments and output as gai.c."""
import socket
import sys

FAMILIES = {"0": socket.AF_UNSPEC, "4": socket.AF_INET, "6": socket.AF_INET6}
NOTFOUND = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def kind(err):
    if err.errno in NOTFOUND:
        return "notfound"
    if err.errno == socket.EAI_AGAIN:
        return "again"
    return "other"


for q in sys.argv[1:]:
    fam, name = q[0], q[2:]
    try:
        if fam == "p":
            host, _ = socket.getnameinfo((name, 0), socket.NI_NAMEREQD)
            out = [host]
        else:
            infos = socket.getaddrinfo(name, None, FAMILIES[fam], socket.SOCK_STREAM)
            out = [info[4][0] for info in infos]
        print(f"{fam}\t{name}\tok\t{','.join(out)}", flush=True)
    except socket.gaierror as err:
        print(f"{fam}\t{name}\terr\t{kind(err)}\t{err}", flush=True)
