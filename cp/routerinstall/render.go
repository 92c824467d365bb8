package routerinstall

import (
	"fmt"
	"io"
	"strings"
	"text/template"
)

// Dataplanes writes the replicas' Dataplane resources, for the control plane's store
// (`kuma-cp apply -f -`): each at its replica's address, which the router's DNS answers.
func Dataplanes(w io.Writer, o Options) error {
	reps, err := Replicas(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# The replicas of router %s (mesh %s): apply them to the control plane (kuma-cp apply -f -).\n", o.Router.Name, o.Router.Mesh)
	for i, r := range reps {
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		fmt.Fprint(w, dataplane(o.Router.Mesh, r, q(r.Address)))
	}
	return nil
}

// agentArgs are `kuma-dp run`'s arguments for replica r whose files are under dir.
func agentArgs(o Options, r Replica, dir string) []string {
	return []string{"run", "--cp-address=" + strings.Join(o.ControlPlanes, ","), "--ca-cert-file=" + dir + "/ca.crt",
		"--dataplane-token-file=" + dir + "/" + r.Name + ".token", "--dataplane-file=" + dir + "/" + r.Name + ".yaml"}
}

func (o Options) check() error {
	switch {
	case len(o.ControlPlanes) == 0:
		return fmt.Errorf("--cp-address: required: the control plane the replicas' agents connect to (grpcs://HOST:PORT)")
	case strings.TrimSpace(o.CACert) == "":
		return fmt.Errorf("--ca-cert-file: required: the control plane's CA, which the replicas' agents trust")
	case o.Token == nil:
		return fmt.Errorf("--token-key-file: required: the replicas' tokens are issued with the control plane's key")
	}
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// files are the replicas' files: the CA, and each replica's token and Dataplane (address
// from a variable when given, else its own).
func files(o Options, reps []Replica, addressVar string) map[string]string {
	out := map[string]string{"ca.crt": o.CACert}
	for _, r := range reps {
		addr := q(r.Address)
		if addressVar != "" {
			addr = "{{ " + addressVar + " }}"
		}
		out[r.Name+".token"] = o.Token(r.Name) + "\n"
		out[r.Name+".yaml"] = dataplane(o.Router.Mesh, r, addr)
	}
	return out
}

// indent is s with every line but the first indented by n spaces.
func indent(n int, s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+strings.Repeat(" ", n))
}

var funcs = template.FuncMap{"q": q, "indent": indent}
