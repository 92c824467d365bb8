package dirsource

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// kubePodDataplane is the Dataplane Kuma writes for the i-th pod of a Kubernetes cluster (as
// `kumactl get dataplanes -o yaml` gives it), for BenchmarkBytesPerDataplane: the pods are
// replicas of workloads of kubeReplicas pods each, spread over kubeNamespaces namespaces.
// Every pod's labels are its inbounds' tags (app, version, and the workload's
// pod-template-hash), beside the tags Kuma adds: kuma.io/service
// (<name>_<namespace>_svc_<port>), k8s.kuma.io/namespace, k8s.kuma.io/service-name,
// k8s.kuma.io/service-port, kuma.io/protocol, kuma.io/zone. Its name is <pod>.<namespace>,
// its address the pod's own. Every 4th workload's Service has a second port (a second
// inbound); every 10th workload is a StatefulSet behind a headless Service, whose pods'
// labels name the pod (statefulset.kubernetes.io/pod-name, apps.kubernetes.io/pod-index)
// and whose inbounds Kuma tags with the pod's name (kuma.io/instance).
func kubePodDataplane(i int) string {
	const kubeReplicas, kubeNamespaces = 5, 20
	w, r := i/kubeReplicas, i%kubeReplicas
	ns := fmt.Sprintf("team-%02d", w%kubeNamespaces)
	app := fmt.Sprintf("svc%d", w)
	labels := [][2]string{{"app", app}, {"version", "v1"}}
	var pod string
	stateful := w%10 == 9
	if stateful {
		pod = fmt.Sprintf("%s-%d", app, r)
		labels = append(labels, [2]string{"apps.kubernetes.io/pod-index", fmt.Sprint(r)},
			[2]string{"controller-revision-hash", app + "-" + kubeHash(app, 10)},
			[2]string{"statefulset.kubernetes.io/pod-name", pod})
	} else {
		hash := kubeHash(app, 10)
		pod = fmt.Sprintf("%s-%s-%s", app, hash, kubeHash(fmt.Sprint(i), 5))
		labels = append(labels, [2]string{"pod-template-hash", hash})
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "type: Dataplane\nmesh: default\nname: %s.%s\nnetworking:\n  address: 10.%d.%d.%d\n  admin:\n    port: 9901\n  inbound:\n",
		pod, ns, 64+(i+1)>>16, (i+1)>>8&255, (i+1)&255)
	ports := [][2]string{{"8080", "http"}}
	if w%4 == 0 {
		ports = append(ports, [2]string{"9090", "grpc"})
	}
	for _, p := range ports {
		fmt.Fprintf(&sb, "    - port: %s\n      health:\n        ready: true\n      tags:\n", p[0])
		for _, l := range labels {
			fmt.Fprintf(&sb, "        %s: %q\n", l[0], l[1])
		}
		fmt.Fprintf(&sb, "        k8s.kuma.io/namespace: %s\n        k8s.kuma.io/service-name: %s\n        k8s.kuma.io/service-port: %q\n",
			ns, app, p[0])
		if stateful {
			fmt.Fprintf(&sb, "        kuma.io/instance: %s\n", pod)
		}
		fmt.Fprintf(&sb, "        kuma.io/protocol: %s\n        kuma.io/service: %s_%s_svc_%s\n        kuma.io/zone: zone-1\n",
			p[1], app, ns, p[0])
	}
	sb.WriteString("  transparentProxying:\n    redirectPortInbound: 15006\n    redirectPortOutbound: 15001\n    ipFamilyMode: DualStack\nprobes:\n  port: 9000\n")
	return sb.String()
}

// kubeHash is n characters of the alphabet Kubernetes writes its hashes and random name
// suffixes in, from s.
func kubeHash(s string, n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := fnv.New64a()
	h.Write([]byte(s))
	v := h.Sum64()
	b := make([]byte, n)
	for j := range b {
		b[j] = alphabet[v%uint64(len(alphabet))]
		v /= uint64(len(alphabet))
	}
	return string(b)
}
