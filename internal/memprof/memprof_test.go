package memprof

import (
	"runtime"
	"testing"
)

func TestOffFromInitOnWithEnable(t *testing.T) {
	if runtime.MemProfileRate != 0 {
		t.Fatalf("MemProfileRate after init = %d, want 0", runtime.MemProfileRate)
	}
	defer func() { runtime.MemProfileRate = 0 }()
	Enable()
	if runtime.MemProfileRate != defaultRate {
		t.Fatalf("MemProfileRate after Enable = %d, want %d", runtime.MemProfileRate, defaultRate)
	}
	runtime.MemProfileRate = 1 // a rate set by hand is left as set
	Enable()
	if runtime.MemProfileRate != 1 {
		t.Errorf("Enable changed a rate set by hand to %d", runtime.MemProfileRate)
	}
}

func TestRateSetByGODEBUG(t *testing.T) {
	for godebug, want := range map[string]bool{
		"": false, "memprofilerate=4096": true, "gctrace=1,memprofilerate=1": true,
		"gctrace=1": false, "xmemprofilerate=1": false, " memprofilerate=0": true,
	} {
		if got := rateSet(godebug); got != want {
			t.Errorf("rateSet(%q) = %v, want %v", godebug, got, want)
		}
	}
}
