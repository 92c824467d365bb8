package routerinstall

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

const routerDoc = `type: Router
mesh: default
name: shard-a
dns: shard-a.apps.example.com
dataplanes: {kuma.io/service: gateway-a}
listener: {port: 8080}
`

func router(t *testing.T, doc string) *mesh.Router {
	t.Helper()
	rs, err := mesh.Decode("r.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rs[0].(*mesh.Router)
}

func options(t *testing.T, doc string, addrs ...string) Options {
	return Options{Router: router(t, doc), Addresses: addrs, ControlPlanes: []string{"grpcs://cp-1:5678", "grpcs://cp-2:5678"},
		CACert: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", Token: func(name string) string { return "kdp1.token-of-" + name }}
}

// The Kubernetes objects decode strictly (no unknown or misspelt field) into Kubernetes'
// own types: a Deployment per replica with anti-affinity, one Service taking the replicas'
// addresses, a PodDisruptionBudget, a Secret whose Dataplane files are the router's replicas
// once the pod's address is filled in.
func TestKubernetesDecodesStrictly(t *testing.T) {
	o := options(t, routerDoc, "192.0.2.10", "192.0.2.11")
	var b bytes.Buffer
	if err := Kubernetes(&b, o); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	var deployments []appsv1.Deployment
	var secret corev1.Secret
	for _, doc := range strings.Split(b.String(), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		kinds[head.Kind]++
		var into any
		switch head.Kind {
		case "Deployment":
			deployments = append(deployments, appsv1.Deployment{})
			into = &deployments[len(deployments)-1]
		case "Secret":
			into = &secret
		case "Service":
			into = &corev1.Service{}
		case "PodDisruptionBudget":
			into = &policyv1.PodDisruptionBudget{}
		default:
			t.Fatalf("an object of kind %q:\n%s", head.Kind, doc)
		}
		if err := decodeStrict(doc, into); err != nil {
			t.Errorf("%s does not decode strictly: %v\n%s", head.Kind, err, doc)
		}
		if svc, ok := into.(*corev1.Service); ok && !slices.Equal(svc.Spec.ExternalIPs, []string{"192.0.2.10", "192.0.2.11"}) {
			t.Errorf("the Service's externalIPs: %v", svc.Spec.ExternalIPs)
		}
		if pdb, ok := into.(*policyv1.PodDisruptionBudget); ok && (pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1) {
			t.Errorf("the PodDisruptionBudget: %+v", pdb.Spec)
		}
	}
	if kinds["Deployment"] != 2 || kinds["Secret"] != 1 || kinds["Service"] != 1 || kinds["PodDisruptionBudget"] != 1 {
		t.Fatalf("objects %v", kinds)
	}
	for i, d := range deployments {
		name := []string{"shard-a-0", "shard-a-1"}[i]
		spec := d.Spec.Template.Spec
		aa := spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || len(aa) != 1 ||
			aa[0].LabelSelector.MatchLabels["kuma.io/router"] != "shard-a" || aa[0].TopologyKey != "kubernetes.io/hostname" {
			t.Errorf("deployment %s: %+v", d.Name, d.Spec)
		}
		args := strings.Join(spec.Containers[0].Args, " ")
		for _, want := range []string{"--cp-address=grpcs://cp-1:5678,grpcs://cp-2:5678", "--dataplane-token-file=/etc/kuma-dp/router/" + name + ".token",
			"--dataplane-file=/etc/kuma-dp/router/" + name + ".yaml", "--dataplane-var=address=$(POD_IP)"} {
			if !strings.Contains(args, want) {
				t.Errorf("deployment %s's args lack %q: %s", d.Name, want, args)
			}
		}
		if spec.Containers[0].Ports[0].ContainerPort != 8080 {
			t.Errorf("the gateway's port: %+v", spec.Containers[0].Ports)
		}
		// the agent's own Dataplane file, as the pod fills it: a replica of the router
		file, err := cplink.RenderVars([]byte(secret.StringData[name+".yaml"]), map[string]string{"address": "10.244.0.7"})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := mesh.Decode(name+".yaml", file)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, file)
		}
		dp := rs[0].(*mesh.Dataplane)
		if _, ok := o.Router.Replica(dp); !ok || dp.Name != name || dp.Networking.Address != "10.244.0.7" || dp.Networking.AdvertisedAddress() != "192.0.2.1"+name[len(name)-1:] {
			t.Errorf("%s's Dataplane: %+v", name, dp.Networking)
		}
		if secret.StringData[name+".token"] != "kdp1.token-of-"+name+"\n" {
			t.Errorf("%s's token: %q", name, secret.StringData[name+".token"])
		}
	}
	if !strings.HasPrefix(secret.StringData["ca.crt"], "-----BEGIN CERTIFICATE-----") {
		t.Errorf("the CA: %q", secret.StringData["ca.crt"])
	}
}

// decodeStrict decodes a YAML document as the API server does, strictly: field names
// case-sensitive, no unknown or duplicate field.
func decodeStrict(doc string, into any) error {
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, into)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// A misspelt field, or one in the wrong case, is what the strict decoding is for.
func TestDecodeStrictRefusesMisspelt(t *testing.T) {
	for _, doc := range []string{"kind: Service\nspec:\n  externalIps: [192.0.2.1]\n", "kind: Service\nspec:\n  externalIPs: [192.0.2.1]\n  bogus: 1\n"} {
		if err := decodeStrict(doc, &corev1.Service{}); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

// Dataplanes prints the replicas as the store takes them: each decodes, is a replica of the
// router, at its address.
func TestDataplanes(t *testing.T) {
	o := options(t, routerDoc, "192.0.2.10", "192.0.2.11")
	var b bytes.Buffer
	if err := Dataplanes(&b, o); err != nil {
		t.Fatal(err)
	}
	rs, err := mesh.Decode("dps.yaml", b.Bytes())
	if err != nil || len(rs) != 2 {
		t.Fatalf("%v\n%s", err, b.String())
	}
	for i, r := range rs {
		dp := r.(*mesh.Dataplane)
		if _, ok := o.Router.Replica(dp); !ok || dp.Networking.Address != o.Addresses[i] {
			t.Errorf("%+v", dp)
		}
	}
}

// What cannot be rendered is an error naming the flag or field and the value.
func TestOptionsErrors(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{options(t, routerDoc, "192.0.2.10"), `router shard-a wants 2 replicas (replicas): give one --address each, got 1 (value "192.0.2.10")`},
		{options(t, routerDoc, "192.0.2.10", "gw.example.com"), `--address "gw.example.com": not an IP address (replica 1 of router shard-a)`},
		{options(t, routerDoc, "192.0.2.10", "192.0.2.10"), `--address "192.0.2.10": given twice`},
		{options(t, strings.Replace(routerDoc, "gateway-a", `"*"`, 1), "192.0.2.10", "192.0.2.11"), `dataplanes: tag kuma.io/service: the value "*" selects`},
		{options(t, strings.Replace(routerDoc, "dataplanes: {kuma.io/service: gateway-a}\n", "", 1), "192.0.2.10", "192.0.2.11"), `router shard-a: dataplanes: empty`},
	} {
		if err := Kubernetes(&bytes.Buffer{}, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	o := options(t, routerDoc, "192.0.2.10", "192.0.2.11")
	o.ControlPlanes = nil
	if _, err := Systemd(o); err == nil || !strings.Contains(err.Error(), "--cp-address: required") {
		t.Errorf("no control plane: %v", err)
	}
}

// A systemd unit per replica, which systemd-analyze verify accepts (when installed); a
// listener under 1024 gets the one capability it needs.
func TestSystemdUnitsVerify(t *testing.T) {
	o := options(t, strings.Replace(routerDoc, "port: 8080", "port: 80", 1), "192.0.2.10", "192.0.2.11")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.Binary = exe // verify wants the command to exist
	fs, err := Systemd(o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	dir := t.TempDir()
	for _, f := range fs {
		names = append(names, f.Name)
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(f.Body), os.FileMode(f.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"ca.crt", "kuma-dp-shard-a-0.service", "shard-a-0.token", "shard-a-0.yaml", "kuma-dp-shard-a-1.service", "shard-a-1.token", "shard-a-1.yaml"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	unit := fs[1].Body
	for _, w := range []string{"ExecStart=" + exe + " run --cp-address=grpcs://cp-1:5678,grpcs://cp-2:5678 --ca-cert-file=/etc/kuma-dp/routers/shard-a/ca.crt",
		"--dataplane-file=/etc/kuma-dp/routers/shard-a/shard-a-0.yaml", "AmbientCapabilities=CAP_NET_BIND_SERVICE", "StateDirectory=kuma-dp/shard-a-0"} {
		if !strings.Contains(unit, w) {
			t.Errorf("the unit lacks %q:\n%s", w, unit)
		}
	}
	rs, err := mesh.Decode("dp.yaml", []byte(fs[3].Body))
	if err != nil || rs[0].(*mesh.Dataplane).Networking.Address != "192.0.2.10" {
		t.Errorf("a VM replica's Dataplane: %v %+v", err, rs)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the units are not verified")
	}
	for _, n := range []string{"kuma-dp-shard-a-0.service", "kuma-dp-shard-a-1.service"} {
		cmd := exec.Command(analyze, "verify", filepath.Join(dir, n))
		out, err := cmd.CombinedOutput()
		// verify also checks the units this one names (network-online.target, which a
		// container may lack): only this unit's own complaints count
		var own []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, n) {
				own = append(own, line)
			}
		}
		if len(own) > 0 || (err != nil && !strings.Contains(string(out), "network-online.target")) {
			t.Errorf("systemd-analyze verify %s: %v\n%s", n, err, out)
		}
	}
}

// The credentials: a missing or wrong file is named with its flag; the tokens issued are for
// the replica's name in the router's mesh, with the expiry asked; the systemd files are
// written with their modes (the token readable by its group only).
func TestCredentialsAndFiles(t *testing.T) {
	dir := t.TempDir()
	ca, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token.key")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ca, key, want string }{
		{"", key, "--ca-cert-file: required"},
		{filepath.Join(dir, "none"), key, `--ca-cert-file "` + filepath.Join(dir, "none") + `"`},
		{key, key, "no PEM certificate in it"},
		{ca, "", "--token-key-file: required"},
	} {
		if _, _, err := Credentials(c.ca, c.key, "default", time.Hour); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Credentials(%q, %q): %v, want %q", c.ca, c.key, err, c.want)
		}
	}
	pem, issue, err := Credentials(ca, key, "m1", time.Hour)
	if err != nil || !strings.HasPrefix(pem, "-----BEGIN CERTIFICATE-----") {
		t.Fatal(pem, err)
	}
	k, _ := token.ReadKey(key)
	id, err := token.Verify(k, issue("shard-a-0"), time.Now())
	if err != nil || id.Name != "shard-a-0" || id.Mesh != "m1" || id.Expires <= time.Now().Unix() || id.Expires > time.Now().Add(time.Hour+time.Minute).Unix() {
		t.Errorf("the token: %+v %v", id, err)
	}
	o := options(t, routerDoc, "192.0.2.10", "192.0.2.11")
	out := filepath.Join(dir, "units")
	var listed bytes.Buffer
	if err := WriteSystemd(o, out, &listed); err != nil {
		t.Fatal(err)
	}
	if strings.Count(listed.String(), "\n") != 7 {
		t.Errorf("listed:\n%s", listed.String())
	}
	if st, err := os.Stat(filepath.Join(out, "shard-a-0.token")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("the token file: %v %v", st.Mode(), err)
	}
}
