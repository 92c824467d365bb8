package routerinstall

import (
	"strings"
	"text/template"
)

// File is one file to install.
type File struct {
	Name string
	Mode uint32 // permission bits
	Body string
}

// vmDir is where a VM keeps a router's files.
func vmDir(router string) string { return "/etc/kuma-dp/routers/" + router }

// Systemd is what runs each replica on a VM (one a host, as the Kubernetes pods'
// anti-affinity): a unit per replica, kuma-dp-<replica>.service, its token and Dataplane
// file (at its own address), and the control plane's CA; each unit's header says where each
// file goes.
func Systemd(o Options) ([]File, error) {
	reps, err := Replicas(o)
	if err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	fs := files(o, reps, "")
	out := []File{{Name: "ca.crt", Mode: 0o644, Body: fs["ca.crt"]}}
	dir := vmDir(o.Router.Name)
	for _, r := range reps {
		args := append(agentArgs(o, r, dir), "--work-dir=/var/lib/kuma-dp/"+r.Name, "--binary-path="+orDefault(o.Envoy, DefaultEnvoy))
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "%", "%%") // systemd's specifiers
		}
		var b strings.Builder
		err := unitTemplate.Execute(&b, map[string]any{"R": r, "Router": o.Router.Name, "Mesh": o.Router.Mesh, "Dir": dir,
			"Protocol": o.Router.ListenerOf().Protocol, "Binary": orDefault(o.Binary, DefaultBinary), "Args": strings.Join(args, " "), "Low": r.Port < 1024})
		if err != nil {
			return nil, err
		}
		out = append(out, File{Name: "kuma-dp-" + r.Name + ".service", Mode: 0o644, Body: b.String()},
			File{Name: r.Name + ".token", Mode: 0o640, Body: fs[r.Name+".token"]},
			File{Name: r.Name + ".yaml", Mode: 0o644, Body: fs[r.Name+".yaml"]})
	}
	return out, nil
}

var unitTemplate = template.Must(template.New("unit").Parse(strings.TrimLeft(`
# Replica {{.R.Name}} of router {{.Router}} (mesh {{.Mesh}}): kuma-dp with Envoy as the gateway on
# {{.Protocol}} port {{.R.Port}} at {{.R.Address}}, the address the router's DNS answers for it.
# One replica a host. Its Dataplane goes to the control plane first
# (kuma-cp router install {{.Router}} -o dataplanes ... | kuma-cp apply -f -), then:
#   useradd --system --uid 5678 --home-dir /var/lib/kuma-dp --shell /usr/sbin/nologin kuma-dp
#   install -m 0755 bin/kuma-dp {{.Binary}}        # and Envoy
#   install -D -m 0644 ca.crt {{.Dir}}/ca.crt
#   install -D -m 0640 -g kuma-dp {{.R.Name}}.token {{.Dir}}/{{.R.Name}}.token
#   install -D -m 0644 {{.R.Name}}.yaml {{.Dir}}/{{.R.Name}}.yaml
#   install -m 0644 kuma-dp-{{.R.Name}}.service /etc/systemd/system/
#   systemctl daemon-reload && systemctl enable --now kuma-dp-{{.R.Name}}
[Unit]
Description=kuma-dp: replica {{.R.Name}} of router {{.Router}} (mesh {{.Mesh}})
Documentation=https://github.com/kumadp/kuma-dp/blob/main/docs/routes.md
Wants=network-online.target
After=network-online.target

[Service]
Type=exec
User=kuma-dp
Group=kuma-dp
# /var/lib/kuma-dp/{{.R.Name}}: Envoy's bootstrap, the unix sockets, the saved model.
StateDirectory=kuma-dp/{{.R.Name}}
StateDirectoryMode=0700
ExecStart={{.Binary}} {{.Args}}
# SIGTERM: readiness 503 (the router's DNS drops it), Envoy drains, then the agent exits 0.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=45
Restart=on-failure
RestartSec=2
RestartPreventExitStatus=1 2
LimitNOFILE=1048576
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
LockPersonality=yes
{{- if .Low}}
# the listener's port is under 1024
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
AmbientCapabilities=CAP_NET_BIND_SERVICE
{{- else}}
CapabilityBoundingSet=
AmbientCapabilities=
{{- end}}

[Install]
WantedBy=multi-user.target
`, "\n")))
