package backends

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/backend"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		kind     string
		settings map[string]string
		wantCaps backend.Capability
		wantErr  string
	}{
		{"local", map[string]string{"path": filepath.Join(dir, "s.sbxstate")}, backend.Locking | backend.CAS | backend.Snapshot | backend.Deletion, ""},
		{"sqlite", map[string]string{"path": filepath.Join(dir, "s.db")}, backend.Locking | backend.CAS | backend.Snapshot | backend.Deletion | backend.Lease | backend.ForceUnlock, ""},
		{"http", map[string]string{"address": "http://127.0.0.1:9/state"}, backend.Deletion, ""},
		{"s3", nil, 0, `unknown kind (known: http, local, postgres, sqlite)`},
		{"local", map[string]string{"file": "x"}, 0, `unknown setting "file"`},
		{"postgres", map[string]string{}, 0, "no dsn"},
	}
	for _, tt := range tests {
		t.Run(tt.kind+tt.wantErr, func(t *testing.T) {
			b, err := Open(context.Background(), tt.kind, tt.settings)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if d := b.Describe(); d.Kind != tt.kind || d.Capabilities != tt.wantCaps {
				t.Fatalf("got %s with %s, want %s with %s", d.Kind, d.Capabilities, tt.kind, tt.wantCaps)
			}
		})
	}
}
