package linuxnet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SetSysctl writes a net.* sysctl inside the namespace, e.g. SetSysctl(ns,
// "net.ipv4.ip_forward", "0"). /proc/sys/net resolves to the namespace of the thread that opens
// it, which Do switches.
func SetSysctl(ns Netns, key, value string) error {
	if !strings.HasPrefix(key, "net.") || strings.Contains(key, "..") || strings.Contains(key, "/") {
		return fmt.Errorf("sysctl %s: only net.* keys are namespaced", key)
	}
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	if err := ns.Do(func() error { return os.WriteFile(path, []byte(value+"\n"), 0o644) }); err != nil {
		return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, ns, err)
	}
	return nil
}

// Sysctl reads a net.* sysctl inside the namespace.
func Sysctl(ns Netns, key string) (string, error) {
	if !strings.HasPrefix(key, "net.") || strings.Contains(key, "..") || strings.Contains(key, "/") {
		return "", fmt.Errorf("sysctl %s: only net.* keys are namespaced", key)
	}
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	var b []byte
	err := ns.Do(func() (err error) { b, err = os.ReadFile(path); return })
	if err != nil {
		return "", fmt.Errorf("sysctl %s in %s: %w", key, ns, err)
	}
	return strings.TrimSpace(string(b)), nil
}
