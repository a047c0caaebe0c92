package config_test

import (
	"fmt"
	"testing"

	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/handlers"
)

func TestScratch(t *testing.T) {
	for _, dir := range []string{"../../examples/lab-small", "../../examples/modules-foreach"} {
		m, src, diags := config.Load(dir)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		top, diags := config.Evaluate(m, src, config.Options{Schemas: handlers.Builtin()})
		for _, d := range diags {
			fmt.Println(d)
		}
		for _, r := range top.Resources {
			fmt.Println(r.Addr, r.DependsOn)
		}
		for _, o := range top.Outputs {
			fmt.Println(o.Name, o.Value.GoString())
		}
		fmt.Println(top.InputDigest(), src.Digest())
	}
}
