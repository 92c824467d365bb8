package tproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The state file remembers what Install changed with netlink (netState), so that Uninstall
// removes exactly that and a re-install keeps owning what an earlier one added.

// statePath is the state file of c's network namespace: with --netns NS the file's name
// gets "-NS" before its extension (tproxy-state-NS.json), as the lock's does, so that one
// --state-file serves every namespace a CNI installs into, each with its own record.
func statePath(c Config) string {
	if c.StateFile == "" || c.NetNS == "" {
		return c.StateFile
	}
	ext := filepath.Ext(c.StateFile)
	return strings.TrimSuffix(c.StateFile, ext) + "-" + c.NetNS + ext
}

func loadState(path string) (netState, error) {
	var st netState
	if path == "" {
		return st, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("state file: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("state file %s: %w", path, err)
	}
	return st, nil
}

func saveState(path string, st netState) error {
	if path == "" {
		return nil
	}
	if len(st.Routes) == 0 && len(st.Addresses) == 0 {
		return removeState(path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	data, _ := json.MarshalIndent(st, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

func removeState(path string) error {
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}
