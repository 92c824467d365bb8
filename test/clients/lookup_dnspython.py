"""Resolves each argument with dnspython's stub resolver (a DNS client written in Python:
its own resolv.conf reading, search list, UDP and TCP; eventlet and gevent route
lookups through it) for dnsserver's real-client test; same arguments and output as gai.c."""
import sys

import dns.exception
import dns.resolver

TYPES = {"0": ["A", "AAAA"], "4": ["A"], "6": ["AAAA"]}
resolver = dns.resolver.Resolver()  # /etc/resolv.conf: nameservers, search, ndots, options


def lookup(fam, name):
    if fam == "p":
        return [r.to_text().rstrip(".") for r in resolver.resolve_address(name)]
    out, nodata = [], None
    for rdtype in TYPES[fam]:
        try:
            out += [r.to_text() for r in resolver.resolve(name, rdtype, search=True)]
        except dns.resolver.NoAnswer as err:  # NODATA: the name exists without this type
            nodata = err
    if not out:
        raise nodata
    return out


for q in sys.argv[1:]:
    fam, name = q[0], q[2:]
    try:
        print(f"{fam}\t{name}\tok\t{','.join(lookup(fam, name))}", flush=True)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer) as err:
        print(f"{fam}\t{name}\terr\tnotfound\t{type(err).__name__}", flush=True)
    except (dns.resolver.NoNameservers, dns.exception.Timeout) as err:  # SERVFAIL, no answer
        print(f"{fam}\t{name}\terr\tagain\t{type(err).__name__}: {err}", flush=True)
    except Exception as err:  # pylint: disable=broad-except
        print(f"{fam}\t{name}\terr\tother\t{type(err).__name__}: {err}", flush=True)
