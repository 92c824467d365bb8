// Package agent composes kuma-dp's parts into the running dataplane agent and owns their
// lifecycle: the model source (dirsource: files; cplink: a control plane), the VIP
// allocator (vipalloc), the resolver (dnsserver) and, when present, the local xDS server
// and Envoy. It owns readiness, the admin HTTP endpoint (/ready, /vips, /metrics,
// /config_dump), reloads and signals, and agent.Config, the settings of kuma-dp run.
//
// It never parses resources, renders hostnames, answers DNS or builds Envoy resources
// itself: each part does that, and the agent only hands one part's result to the next,
// keeping the last good model when a change is refused, and logging and counting the files
// a source served at their last good version (cplink.Update.Refused).
package agent
