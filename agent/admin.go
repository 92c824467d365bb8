package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"github.com/kumadp/kuma-dp/internal/memprof"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// readiness is /ready's answer: ok only once the first model is applied, DNS answers and,
// with Envoy, Envoy is live; never while draining.
func (a *Agent) readiness() (bool, string) {
	switch {
	case a.draining.Load():
		return false, "TERMINATING"
	case !a.dnsReady.Load():
		return false, "NOT READY: DNS not answering yet"
	}
	if snap, _, _, _ := a.model.get(); snap == nil {
		return false, "NOT READY: no model loaded"
	}
	if a.parts.Envoy != nil && !a.envoyPublished.Load() {
		return false, "NOT READY: Envoy's configuration not published yet"
	}
	if a.parts.Envoy != nil && !a.parts.Envoy.Live() {
		return false, "NOT READY: Envoy not live"
	}
	if a.stale.Load() {
		return true, "READY (stale: serving the model saved at the last sync; the control plane is not reached yet)"
	}
	return true, "READY"
}

func (a *Agent) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", a.serveReady)
	mux.HandleFunc("GET /vips", func(w http.ResponseWriter, _ *http.Request) {
		_, table, _, _ := a.model.get()
		entries := table.Entries()
		if entries == nil {
			entries = []*vipalloc.Entry{}
		}
		skipped := table.Skipped()
		if skipped == nil {
			skipped = []vipalloc.Skip{}
		}
		mes := table.MeshExternalServiceStatuses()
		if mes == nil {
			mes = map[string]vipalloc.MESStatus{}
		}
		ms := table.MeshServiceStatuses()
		if ms == nil {
			ms = map[string]vipalloc.MeshServiceStatus{}
		}
		// The shape of `kuma-dp vips -o json`: entries, tuples skipped with their reason,
		// the MeshExternalService design's status block of each MeshExternalService and
		// each MeshService's status.
		writeJSON(w, map[string]any{"entries": entries, "skipped": skipped, "meshExternalServices": mes, "meshServices": ms})
	})
	mux.HandleFunc("GET /config_dump", func(w http.ResponseWriter, _ *http.Request) {
		snap, table, envoy, envoyErr := a.model.get()
		dump := map[string]any{"model": snap, "vips": table.Entries(), "envoy": envoy}
		if envoyErr != nil {
			dump["envoyError"] = envoyErr.Error()
		}
		redacted, err := redacted(dump)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, redacted)
	})
	mux.Handle("GET /metrics", a.metrics.handler(a.parts.DNS.MetricsHandler()))
	if a.cfg.Admin.Pprof {
		memprof.Enable() // off from the start otherwise (the model is loaded after this)
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, adminIndex)
	})
	return mux
}

// adminIndex is what GET / lists: every endpoint of the admin port.
const adminIndex = `kuma-dp admin endpoint
  /ready        200 READY once the model is applied, DNS answers and (with Envoy) Envoy is live; 503 otherwise
  /vips         this dataplane's hostnames and VIPs, skipped tuples, MeshExternalService statuses (JSON)
  /config_dump  the model and Envoy's generated resources (JSON, private keys redacted)
  /metrics      Prometheus metrics (kuma_dp_*, DNS)
  /debug/pprof/ Go's profiles (heap, CPU...), with --admin-pprof only
`

func (a *Agent) serveReady(w http.ResponseWriter, _ *http.Request) {
	ok, msg := a.readiness()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, msg)
}

// redacted is v as generic JSON with every private key given inline replaced by
// "[redacted]": a MeshExternalService's spec.tls.verification.clientKey in the model, and
// Envoy's tls_certificates[].private_key in the generated clusters. Secret names stay.
func redacted(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	redact(out)
	return out, nil
}

func redact(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if k == "clientKey" || k == "privateKey" {
				if ds, ok := child.(map[string]any); ok {
					for _, f := range []string{"inline", "inlineString", "inlineBytes"} {
						if _, ok := ds[f]; ok {
							ds[f] = "[redacted]"
						}
					}
				}
				continue
			}
			redact(child)
		}
	case []any:
		for _, child := range t {
			redact(child)
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ReadyInfo is what the ready file holds (and the "ready" log line says): the bound
// addresses, useful when ports were chosen by the kernel (port 0).
type ReadyInfo struct {
	PID     int      `json:"pid"`
	Admin   string   `json:"admin"`
	DNSUDP  []string `json:"dnsUDP"`
	DNSTCP  []string `json:"dnsTCP"`
	Startup string   `json:"startup"`
}

func (a *Agent) announceReady() {
	udp, tcp := a.parts.DNS.Addrs()
	info := ReadyInfo{PID: os.Getpid(), Admin: a.AdminAddr().String(), DNSUDP: addrStrings(udp),
		DNSTCP: addrStrings(tcp), Startup: time.Since(a.start).Round(time.Microsecond).String()}
	a.log.Info("ready", "admin", info.Admin, "dns_udp", info.DNSUDP, "dns_tcp", info.DNSTCP,
		"envoy", a.parts.Envoy != nil, "startup", info.Startup)
	// Starting the resolver and the admin endpoint ran code that serving does not run
	// again: its binary pages go back too (memory.go), once what follows the start (the
	// sources' first watches and cache writes) has settled.
	a.memory.settle()
	if a.cfg.Runtime.ReadyFile == "" {
		return
	}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := writeFileAtomic(a.cfg.Runtime.ReadyFile, append(b, '\n')); err != nil {
		a.log.Error("cannot write the ready file", "path", a.cfg.Runtime.ReadyFile, "error", err)
	}
}

// removeStaleReadyFile removes, at start, a ready file a killed run left behind: it names
// that run's addresses, and whoever waits for the file would take this agent for ready.
func (a *Agent) removeStaleReadyFile() {
	f := a.cfg.Runtime.ReadyFile
	if f == "" {
		return
	}
	switch err := os.Remove(f); {
	case err == nil:
		a.log.Info("removed the ready file an earlier run left (it was not stopped cleanly)", "path", f)
	case !errors.Is(err, os.ErrNotExist):
		a.log.Warn("cannot remove the ready file an earlier run left; it is written again once ready", "path", f, "error", err)
	}
}

func (a *Agent) removeReadyFile() {
	if f := a.cfg.Runtime.ReadyFile; f != "" && a.ready.Load() {
		_ = os.Remove(f)
	}
}

func addrStrings(as []net.Addr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// writeFileAtomic writes through a temporary file and a rename, so a reader never sees a
// half-written file.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
