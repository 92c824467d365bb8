%% Resolves each argument with Erlang's inet_res (a DNS client written in Erlang: its own
%% resolv.conf reading, search list, UDP and TCP) for dnsserver's real-client test; same
%% arguments and output as gai.c. Run: escript lookup.escript 0:NAME p:IP ...
%% inet_res reports a name without records of the type as nxdomain too: "notfound".
-mode(compile).

main(Queries) ->
    %% inet_res caches records, 100 by default: a bigger answer set (60 A + 60 AAAA
    %% here) would come back from that cache with records missing.
    ok = inet_db:set_cache_size(1000),
    lists:foreach(fun query/1, Queries).

query([Fam, $: | Name]) ->
    R = case Fam of
            $p ->
                {ok, Ip} = inet:parse_address(Name),
                case inet_res:gethostbyaddr(Ip) of
                    {ok, {hostent, Host, _, _, _, _}} -> {ok, [Host]};
                    E -> E
                end;
            $4 -> addrs(Name, [a]);
            $6 -> addrs(Name, [aaaa]);
            _ -> addrs(Name, [a, aaaa])
        end,
    case R of
        {ok, Out} ->
            io:format("~c\t~s\tok\t~s~n", [Fam, Name, lists:join(",", Out)]);
        {error, Why} ->
            Kind = case Why of
                       nxdomain -> "notfound";
                       servfail -> "again";
                       timeout -> "again";
                       _ -> "other"
                   end,
            io:format("~c\t~s\terr\t~s\t~p~n", [Fam, Name, Kind, Why])
    end.

%% addrs: the addresses of every type asked; found when any type has some.
addrs(Name, Types) ->
    Rs = [inet_res:getbyname(Name, T) || T <- Types],
    case [inet:ntoa(A) || {ok, {hostent, _, _, _, _, As}} <- Rs, A <- As] of
        [] -> hd([E || {error, _} = E <- Rs] ++ [{error, nxdomain}]);
        Out -> {ok, Out}
    end.
