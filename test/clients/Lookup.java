// Resolves each argument with InetAddress (getaddrinfo / getnameinfo underneath) for
// dnsserver's real-client test; same arguments and output as gai.c. Run as a single-file
// source program: java Lookup.java 0:NAME p:IP ...
// Only family 0 ("any address", as Java applications ask) and p are supported.
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.List;

public class Lookup {
    public static void main(String[] args) {
        for (String q : args) {
            char fam = q.charAt(0);
            String name = q.substring(2);
            try {
                List<String> out = new ArrayList<>();
                if (fam == 'p') {
                    InetAddress a = InetAddress.getByName(name);
                    String host = a.getCanonicalHostName();
                    if (host.equals(a.getHostAddress())) {
                        throw new UnknownHostException("no PTR for " + name);
                    }
                    out.add(host);
                } else {
                    for (InetAddress a : InetAddress.getAllByName(name)) {
                        out.add(a.getHostAddress());
                    }
                }
                System.out.println(fam + "\t" + name + "\tok\t" + String.join(",", out));
            } catch (UnknownHostException e) {
                System.out.println(fam + "\t" + name + "\terr\tnotfound\t" + e);
            } catch (Exception e) {
                System.out.println(fam + "\t" + name + "\terr\tother\t" + e);
            }
        }
    }
}
