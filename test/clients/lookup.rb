# Resolves each argument with Ruby's Resolv::DNS (a DNS client written in Ruby: its own
# resolv.conf reading, search list, UDP and TCP) for dnsserver's real-client test; same
# arguments and output as gai.c. Resolv reports no error kinds: nothing found is
# "notfound".
require 'resolv'

dns = Resolv::DNS.new
ARGV.each do |q|
  fam, name = q[0], q[2..]
  out =
    case fam
    when 'p' then dns.getnames(name).map(&:to_s)
    when '4' then dns.getresources(name, Resolv::DNS::Resource::IN::A).map { |r| r.address.to_s }
    when '6' then dns.getresources(name, Resolv::DNS::Resource::IN::AAAA).map { |r| r.address.to_s }
    else dns.getaddresses(name).map(&:to_s)
    end
  if out.empty?
    puts "#{fam}\t#{name}\terr\tnotfound\tnothing found"
  else
    puts "#{fam}\t#{name}\tok\t#{out.join(',')}"
  end
rescue StandardError => e
  puts "#{fam}\t#{name}\terr\tother\t#{e.class}: #{e}"
end
