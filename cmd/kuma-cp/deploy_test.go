package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// manifest is one document of deploy/kubernetes, decoded into the Kubernetes API's type.
type manifest struct {
	file, kind string
	obj        any
}

// kubeTypes are the kinds deploy/kubernetes may hold, as the API server reads them.
var kubeTypes = map[string]func() any{
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Pod":                        func() any { return &corev1.Pod{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// kubeManifests decodes every document of deploy/kubernetes strictly: a field the type does
// not have (a typo, a field at the wrong level) fails as the API server would refuse it.
func kubeManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("deploy/kubernetes: %v %v", files, err)
	}
	var out []manifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			if head.Kind == "" {
				continue // comments only
			}
			newObj := kubeTypes[head.APIVersion+"/"+head.Kind]
			if newObj == nil {
				t.Fatalf("%s#%d: %s %s: not a kind this test knows: add its type", f, i, head.APIVersion, head.Kind)
			}
			obj := newObj()
			// As the API server reads it: field names case-sensitive, unknown and duplicate
			// fields refused (encoding/json would take readOnlyRootFileSystem silently).
			j, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				t.Errorf("%s#%d (%s): %v", f, i, head.Kind, err)
				continue
			}
			strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields)
			if err != nil || len(strict) > 0 {
				t.Errorf("%s#%d (%s): %v %v", f, i, head.Kind, err, strict)
				continue
			}
			out = append(out, manifest{file: filepath.Base(f), kind: head.Kind, obj: obj})
		}
	}
	return out
}

// Every manifest of deploy/kubernetes decodes strictly into the Kubernetes API's types, and
// every flag a container passes to kuma-cp or kuma-dp is one of the command's flags (with
// the value's $(VAR) as the kubelet fills it).
func TestKubernetesManifests(t *testing.T) {
	var kumaDP string
	for _, m := range kubeManifests(t) {
		var spec *corev1.PodSpec
		switch o := m.obj.(type) {
		case *corev1.Pod:
			spec = &o.Spec
		case *appsv1.Deployment:
			spec = &o.Spec.Template.Spec
		}
		if spec == nil {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			args := expandEnv(c.Args, c.Env)
			switch {
			case strings.HasPrefix(c.Image, "kuma-cp:"):
				var out, errb bytes.Buffer
				if rc := dispatch(append(args, "--help"), &out, &errb); rc != exitOK {
					t.Errorf("%s: container %s: kuma-cp %s: exit %d: %s", m.file, c.Name, strings.Join(args, " "), rc, errb.String())
				}
			case strings.HasPrefix(c.Image, "kuma-dp:"):
				if kumaDP == "" {
					kumaDP = bins.Build(t, "kuma-dp", "../kuma-dp")
				}
				if out, err := exec.Command(kumaDP, append(args, "--help")...).CombinedOutput(); err != nil {
					t.Errorf("%s: container %s: kuma-dp %s: %v: %s", m.file, c.Name, strings.Join(args, " "), err, out)
				}
			}
		}
	}
}

// kuma-cp's Deployment runs as written: the etcd TLS secret mounted and used for https://
// endpoints, every file a flag names inside a mounted secret, probes on /ready and /healthz,
// replicas spread over nodes and a PodDisruptionBudget keeping all but one, a Service
// exposing the agents' link, the API, the metrics and DNS on port 53 over UDP and TCP.
func TestKubernetesControlPlaneDeployable(t *testing.T) {
	var dep *appsv1.Deployment
	var svc *corev1.Service
	var pdb *policyv1.PodDisruptionBudget
	for _, m := range kubeManifests(t) {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			if o.Name == "kuma-cp" {
				dep = o
			}
		case *corev1.Service:
			if o.Name == "kuma-cp" {
				svc = o
			}
		case *policyv1.PodDisruptionBudget:
			pdb = o
		}
	}
	if dep == nil || svc == nil || pdb == nil {
		t.Fatalf("deploy/kubernetes: want kuma-cp's Deployment, Service and PodDisruptionBudget, got %v %v %v", dep != nil, svc != nil, pdb != nil)
	}
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		flags[k] = v
	}
	if strings.Contains(flags["--etcd-endpoints"], "https://") && flags["--etcd-ca-file"] == "" {
		t.Errorf("https:// etcd endpoints without --etcd-ca-file")
	}
	mounts := map[string]string{} // mount path -> secret
	secrets := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = secrets[m.Name]
	}
	for flag, v := range flags {
		if !strings.HasSuffix(flag, "-file") {
			continue
		}
		if secret := mounts[filepath.Dir(v)]; secret == "" {
			t.Errorf("%s=%s: no secret is mounted at %s", flag, v, filepath.Dir(v))
		}
	}
	probe := func(p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
			t.Errorf("want a probe on %s: %+v", path, p)
		}
	}
	probe(c.ReadinessProbe, "/ready")
	probe(c.LivenessProbe, "/healthz")
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil {
		t.Error("kuma-cp's replicas have no anti-affinity: they may all land on one node")
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		fmt.Sprint(pdb.Spec.Selector.MatchLabels) != fmt.Sprint(dep.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget: %+v, want maxUnavailable 1 on the Deployment's pods", pdb.Spec)
	}
	want := map[string]bool{"5678/TCP": false, "5681/TCP": false, "5680/TCP": false, "53/UDP": false, "53/TCP": false}
	for _, p := range svc.Spec.Ports {
		want[fmt.Sprintf("%d/%s", p.Port, p.Protocol)] = true
	}
	for port, ok := range want {
		if !ok {
			t.Errorf("the Service does not expose %s", port)
		}
	}
}

// expandEnv fills $(VAR) as the kubelet does, from the container's env (a value taken from
// the pod, as $(POD_NAME), becomes a sample).
func expandEnv(args []string, env []corev1.EnvVar) []string {
	vals := map[string]string{}
	for _, e := range env {
		vals[e.Name] = e.Value
		if e.ValueFrom != nil {
			vals[e.Name] = "sample-" + strings.ToLower(e.Name)
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(a, func(m string) string {
			return vals[m[2:len(m)-1]]
		})
	}
	return out
}

// deploy/systemd/kuma-cp.service passes serve's flags only, and systemd-analyze verify (where
// installed) accepts the unit as written, with its binary and environment file in place.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/kuma-cp.service")
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile("../../deploy/systemd/kuma-cp.env")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(env), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			vars[k] = v
		}
	}
	text := strings.ReplaceAll(string(unit), "\\\n", " ")
	start := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(text)
	if start == nil {
		t.Fatal("no ExecStart")
	}
	args := strings.Fields(regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(start[1], func(m string) string {
		return vars[m[2:len(m)-1]]
	}))
	if args[0] != "/usr/local/bin/kuma-cp" {
		t.Fatalf("ExecStart runs %s", args[0])
	}
	args = append(args[1:], "--help")
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "%H", "host-1")
	}
	var out, errb bytes.Buffer
	if rc := dispatch(args, &out, &errb); rc != exitOK {
		t.Errorf("kuma-cp %s: exit %d: %s", strings.Join(args, " "), rc, errb.String())
	}
	for _, want := range []string{"Wants=network-online.target", "User=kuma-cp", "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE"} {
		if !strings.Contains(string(unit), "\n"+want+"\n") {
			t.Errorf("kuma-cp.service lacks %s", want)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit's syntax is not verified")
	}
	// verify checks that ExecStart's binary and the environment file exist: both put in
	// place in a copy of the unit.
	dir := t.TempDir()
	bin := filepath.Join(dir, "kuma-cp")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	envFile, _ := filepath.Abs("../../deploy/systemd/kuma-cp.env")
	copyUnit := strings.NewReplacer("/usr/local/bin/kuma-cp", bin, "/etc/kuma/kuma-cp.env", envFile).Replace(string(unit))
	path := filepath.Join(dir, "kuma-cp.service")
	if err := os.WriteFile(path, []byte(copyUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify kuma-cp.service: %v\n%s", err, out)
	}
}
