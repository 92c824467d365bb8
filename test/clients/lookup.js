// Resolves each argument with Node's dns module for dnsserver's real-client test; same
// arguments and output as gai.c. The first argument picks the API:
//   lookup          dns.lookup (getaddrinfo on libuv's thread pool)
//   resolve         dns.resolve4 / resolve6 / reverse (c-ares, servers from resolv.conf)
//   resolve@IP:PORT the same through new dns.Resolver() with setServers([IP:PORT])
'use strict';
const dns = require('node:dns');

const [mode, ...queries] = process.argv.slice(2);
let resolver = dns.promises;
if (mode.startsWith('resolve@')) {
  resolver = new dns.promises.Resolver();
  resolver.setServers([mode.slice('resolve@'.length)]);
}

function kind(err) {
  switch (err.code) {
    case 'ENOTFOUND': case 'ENODATA': return 'notfound';
    case 'EAI_AGAIN': case 'ETIMEOUT': case 'ESERVFAIL': return 'again';
    default: return 'other';
  }
}

async function one(fam, name) {
  if (mode === 'lookup') {
    if (fam === 'p') return [(await dns.promises.lookupService(name, 0)).hostname];
    const res = await dns.promises.lookup(name, { all: true, family: Number(fam), verbatim: true });
    return res.map((r) => r.address);
  }
  if (fam === 'p') return resolver.reverse(name);
  if (fam === '4') return resolver.resolve4(name);
  if (fam === '6') return resolver.resolve6(name);
  // both families, as an application asking for "any address" does; found if either is
  const got = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
  const ok = got.filter((g) => g.status === 'fulfilled').flatMap((g) => g.value);
  if (ok.length === 0) {
    const bad = got.map((g) => g.reason).find((e) => kind(e) !== 'notfound');
    throw bad || got[0].reason;
  }
  return ok;
}

(async () => {
  for (const q of queries) {
    const fam = q[0];
    const name = q.slice(2);
    try {
      const out = await one(fam, name);
      console.log(`${fam}\t${name}\tok\t${out.join(',')}`);
    } catch (err) {
      console.log(`${fam}\t${name}\terr\t${kind(err)}\t${err.code} ${err.message}`);
    }
  }
})();
