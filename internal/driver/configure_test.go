package driver

import (
	"errors"
	"strings"
	"testing"
)

// configurable accepts one key, "path", which must not be empty.
type configurable struct {
	execOnly
	path string
}

func (c *configurable) Configure(settings map[string]string) error {
	if err := CheckSettingKeys("x", settings, "path"); err != nil {
		return err
	}
	if p, ok := settings["path"]; ok {
		if p == "" {
			return &SettingError{Driver: "x", Key: "path", Err: errors.New("empty")}
		}
		c.path = p
	}
	return nil
}

func TestRegistryConfigure(t *testing.T) {
	plain := NewRegistry()
	if err := plain.Register(execOnly{}); err != nil {
		t.Fatal(err)
	}
	if err := plain.Configure("x", nil); err != nil {
		t.Fatalf("no settings for a driver without settings: %v", err)
	}
	var se *SettingError
	err := plain.Configure("x", map[string]string{"b": "1", "a": "2"})
	if !errors.As(err, &se) || se.Key != "a" || !errors.Is(err, ErrInvalid) ||
		err.Error() != `substrate driver "x": unknown setting "a" (known: none)` {
		t.Fatalf("a key for a driver without settings: got %v", err)
	}
	if err := plain.Configure("nope", nil); err == nil {
		t.Fatal("unknown driver configured")
	}

	c := &configurable{}
	r := NewRegistry()
	if err := r.Register(c); err != nil {
		t.Fatal(err)
	}
	if err := r.Configure("x", map[string]string{"path": "/p"}); err != nil || c.path != "/p" {
		t.Fatalf("good setting: err %v, path %q", err, c.path)
	}
	err = r.Configure("x", map[string]string{"path": "/q", "colour": "red"})
	if !errors.As(err, &se) || se.Key != "colour" || !strings.Contains(err.Error(), "(known: path)") || c.path != "/p" {
		t.Fatalf("unknown key: got %v (path %q)", err, c.path)
	}
	err = r.Configure("x", map[string]string{"path": ""})
	if !errors.As(err, &se) || se.Key != "path" || !errors.Is(err, ErrInvalid) ||
		err.Error() != `substrate driver "x": setting "path": empty` {
		t.Fatalf("bad value: got %v", err)
	}
}
