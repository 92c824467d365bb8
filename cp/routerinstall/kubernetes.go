package routerinstall

import (
	"io"
	"maps"
	"slices"
	"strings"
	"text/template"
)

// podDir is where a replica's pod mounts the router's Secret.
const podDir = "/etc/kuma-dp/router"

// Kubernetes writes the objects that run the router's replicas, for `kubectl apply -f -`:
// a Secret with the control plane's CA and each replica's token and Dataplane file (its
// address the pod's IP, advertising the replica's), a Deployment per replica (a replica is
// a dataplane with a name and token of its own; Recreate, so one agent holds that name at a
// time) whose pods keep off each other's nodes (anti-affinity), a Service taking the
// replicas' addresses (externalIPs) to the ready pods, and a PodDisruptionBudget that lets
// one replica go at a time. Their Dataplanes go to the control plane (Dataplanes).
func Kubernetes(w io.Writer, o Options) error {
	reps, err := Replicas(o)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	fs := files(o, reps, "address")
	type pod struct {
		Replica
		Args []string
	}
	data := struct {
		O         Options
		Router    string
		Mesh      string
		Namespace string
		Image     string
		Port      uint32
		Low       bool // a port under 1024: NET_BIND_SERVICE
		Files     map[string]string
		Keys      []string
		Pods      []pod
		Addresses []string
	}{O: o, Router: o.Router.Name, Mesh: o.Router.Mesh, Namespace: orDefault(o.Namespace, DefaultNamespace), Image: orDefault(o.Image, DefaultImage),
		Port: o.Router.ListenerOf().Port, Files: fs, Keys: slices.Sorted(maps.Keys(fs))}
	data.Low = data.Port < 1024
	for _, r := range reps {
		args := append(agentArgs(o, r, podDir), "--dataplane-var=address=$(POD_IP)", "--work-dir=/var/lib/kuma-dp",
			"--readiness-address=:9901", "--log-format=json")
		data.Pods = append(data.Pods, pod{r, args})
		data.Addresses = append(data.Addresses, r.Address)
	}
	return kubeTemplate.Execute(w, data)
}

var kubeTemplate = template.Must(template.New("kubernetes").Funcs(funcs).Parse(strings.TrimLeft(`
# Router {{.Router}} of mesh {{.Mesh}}: {{len .Pods}} replicas, kuma-dp with Envoy as the gateway on
# {{.O.Router.ListenerOf.Protocol}} port {{.Port}}. Their Dataplanes go to the control plane first:
#   kuma-cp router install {{.Router}} -o dataplanes ... | kuma-cp apply -f -
#   kuma-cp router install {{.Router}} -o yaml ... | kubectl apply -f -
# Re-run both after changing the router: they print its new desired state.
apiVersion: v1
kind: Secret
metadata:
  name: {{q (print "router-" .Router)}}
  namespace: {{q .Namespace}}
  labels:
    app.kubernetes.io/name: kuma-router
    kuma.io/router: {{q .Router}}
type: Opaque
stringData:
{{- range .Keys}}
  {{q .}}: |
    {{indent 4 (index $.Files .)}}
{{- end}}
{{- range .Pods}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{q (print "router-" .Name)}}
  namespace: {{q $.Namespace}}
  labels:
    app.kubernetes.io/name: kuma-router
    kuma.io/router: {{q $.Router}}
    kuma.io/router-replica: {{q .Name}}
spec:
  replicas: 1
  strategy:
    type: Recreate
  selector:
    matchLabels:
      kuma.io/router: {{q $.Router}}
      kuma.io/router-replica: {{q .Name}}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: kuma-router
        kuma.io/router: {{q $.Router}}
        kuma.io/router-replica: {{q .Name}}
    spec:
      terminationGracePeriodSeconds: 40
      securityContext:
        fsGroup: 5678
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels:
                kuma.io/router: {{q $.Router}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: kuma-dp
        image: {{q $.Image}}
        args:
{{- range .Args}}
        - {{q .}}
{{- end}}
        env:
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        - name: KUMA_DATAPLANE_DRAIN_TIME
          value: "30s"
        ports:
        - name: http
          containerPort: {{$.Port}}
        - name: readiness
          containerPort: 9901
        readinessProbe:
          httpGet:
            path: /ready
            port: readiness
          periodSeconds: 2
          failureThreshold: 1
        securityContext:
          runAsUser: 5678
          runAsGroup: 5678
          runAsNonRoot: true
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          capabilities:
            drop: ["ALL"]
{{- if $.Low}}
            add: ["NET_BIND_SERVICE"]
{{- end}}
        resources:
          requests:
            cpu: 100m
            memory: 64Mi
          limits:
            memory: 512Mi
        volumeMounts:
        - name: router
          mountPath: "/etc/kuma-dp/router"
          readOnly: true
        - name: work
          mountPath: /var/lib/kuma-dp
      volumes:
      - name: router
        secret:
          secretName: {{q (print "router-" $.Router)}}
          defaultMode: 288 # 0440: the group (fsGroup 5678) reads the tokens
      - name: work
        emptyDir: {}
{{- end}}
---
apiVersion: v1
kind: Service
metadata:
  name: {{q (print "router-" .Router)}}
  namespace: {{q .Namespace}}
  labels:
    app.kubernetes.io/name: kuma-router
    kuma.io/router: {{q .Router}}
spec:
  selector:
    kuma.io/router: {{q .Router}}
  ports:
  - name: http
    port: {{.Port}}
    targetPort: http
  # the replicas' addresses, which the router's DNS answers, taken to its ready pods
  externalIPs:
{{- range .Addresses}}
  - {{q .}}
{{- end}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{q (print "router-" .Router)}}
  namespace: {{q .Namespace}}
  labels:
    app.kubernetes.io/name: kuma-router
    kuma.io/router: {{q .Router}}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      kuma.io/router: {{q .Router}}
`, "\n")))
