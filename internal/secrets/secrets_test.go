package secrets

import (
	"context"
	"errors"
	"testing"
)

func TestParseRef(t *testing.T) {
	tests := []struct {
		in      string
		want    Ref
		wantErr bool
	}{
		{"secret://env/TOKEN", EnvRef("TOKEN"), false},
		{"secret://env/_a1", EnvRef("_a1"), false},
		{"secret://env/", Ref{}, true},
		{"secret://vault/x", Ref{}, true},
		{"secret://env/1X", Ref{}, true},
		{"TOKEN", Ref{}, true},
		{"secret://env/A/B", Ref{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRef(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err: got %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if err == nil && got.String() != tt.in {
				t.Errorf("String: got %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestEnvResolver(t *testing.T) {
	env := map[string]string{"TOKEN": "hunter2-long"}
	red := &Redactor{}
	r := &EnvResolver{Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Redactor: red}
	got, err := r.Resolve(context.Background(), EnvRef("TOKEN"))
	if err != nil || got != "hunter2-long" {
		t.Fatalf("Resolve: got %q, %v, want hunter2-long", got, err)
	}
	if _, err := r.Resolve(context.Background(), EnvRef("MISSING")); !errors.Is(err, ErrMissing) {
		t.Errorf("missing: got %v, want ErrMissing", err)
	}
	s, err := ResolveString(context.Background(), r, "Bearer secret://env/TOKEN!")
	if err != nil || s != "Bearer hunter2-long!" {
		t.Errorf("ResolveString: got %q, %v", s, err)
	}
	if _, err := ResolveString(context.Background(), r, "x secret://env/MISSING"); !errors.Is(err, ErrMissing) {
		t.Errorf("ResolveString missing: got %v, want ErrMissing", err)
	}
	if got, want := red.Redact("token=hunter2-long b64=aHVudGVyMi1sb25n hex=68756e746572322d6c6f6e67"),
		"token=(redacted) b64=(redacted) hex=(redacted)"; got != want {
		t.Errorf("Redact: got %q, want %q", got, want)
	}
}

func TestLeaks(t *testing.T) {
	v := `pa"ss/word+`
	tests := []struct {
		name string
		data string
		leak bool
	}{
		{"plain", "x " + v, true},
		{"json", `{"a":"pa\"ss/word+"}`, true},
		{"base64", "cGEic3Mvd29yZCs=", true},
		{"hex", "7061227373", false},
		{"hex full", "706122737 3", false},
		{"clean", "secret://env/PW", false},
	}
	for _, tt := range tests {
		if got := len(Leaks([]byte(tt.data), v)) > 0; got != tt.leak {
			t.Errorf("%s: got leak %v, want %v", tt.name, got, tt.leak)
		}
	}
	if refs := FindRefs("a secret://env/A b secret://env/B_2"); len(refs) != 2 || refs[1].Name != "B_2" {
		t.Errorf("FindRefs: got %v", refs)
	}
}
