package sysbox

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/secrets"
)

// configureDrivers hands each substrate driver block's settings (secret references resolved from
// the environment) to its driver in reg, before any driver call. A setting the driver rejects is
// an error diagnostic at that attribute; a resolved secret never appears in one.
func (a *App) configureDrivers(reg *driver.Registry, top *config.Topology) hcl.Diagnostics {
	var blocks []*config.Block
	if top.Root != nil && top.Root.Substrate != nil {
		blocks = top.Root.Substrate.Drivers
	}
	redactor := &secrets.Redactor{}
	res := &secrets.EnvResolver{Lookup: a.Env.LookupEnv, Redactor: redactor}
	var diags hcl.Diagnostics
	for i, d := range top.Substrate.Drivers {
		var blk *config.Block
		if i < len(blocks) && blocks[i].Label == d.Name { // evaluated in declaration order
			blk = blocks[i]
		}
		at := func(key string) *hcl.Range {
			if blk == nil {
				return nil
			}
			if attr, ok := blk.Attrs[key]; ok {
				return attr.NameRange.Ptr()
			}
			return blk.DeclRange.Ptr()
		}
		fail := func(key, detail string) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid driver setting",
				Detail: redactor.Redact(detail), Subject: at(key)})
		}
		keys := make([]string, 0, len(d.Attrs))
		for k := range d.Attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		settings := map[string]string{}
		for _, k := range keys {
			v := d.Attrs[k]
			if v.IsKnown() && !v.IsNull() && (v.Type() == cty.Number || v.Type() == cty.Bool) {
				v, _ = convert.Convert(v, cty.String) // uid = 1234 reads as "1234"; a known number or bool always converts
			}
			if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
				fail(k, fmt.Sprintf("substrate driver %q: setting %q must be a string, number or bool", d.Name, k))
				continue
			}
			// The environment lookup does not block; the loaders have no context to pass.
			s, err := secrets.ResolveString(context.Background(), res, v.AsString())
			if err != nil {
				fail(k, fmt.Sprintf("substrate driver %q: setting %q: %v", d.Name, k, err))
				continue
			}
			settings[k] = s
		}
		if len(settings) < len(keys) {
			continue
		}
		if _, err := reg.Driver(d.Name); err != nil && len(settings) == 0 {
			continue // an unknown driver without settings is left to the resources that use it
		}
		if err := reg.Configure(d.Name, settings); err != nil {
			key := ""
			var se *driver.SettingError
			if errors.As(err, &se) {
				key = se.Key
			}
			fail(key, err.Error())
		}
	}
	return diags
}
