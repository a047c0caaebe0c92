package sysbox

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"zyvor.dev/sysbox/internal/config"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/durable"
)

func init() { register(newFmtCommand) }

func newFmtCommand(app *App) *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "fmt [FILE|DIR]...",
		Short: "Rewrite topology files in the canonical HCL style",
		Long: `fmt rewrites *.sysbox.hcl and *.sysbox.vars.hcl files (in the topology directory and below,
or the files and directories given) in the canonical style. With -check it changes nothing,
lists the files that are not formatted and exits 1 if there are any.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{app.dir()}
			}
			files, err := hclFiles(args)
			if err != nil {
				return err
			}
			var unformatted []string
			var diags hcl.Diagnostics
			for _, f := range files {
				src, err := config.ReadInput(f, config.MaxInputFile)
				if err != nil {
					return err
				}
				if _, d := hclsyntax.ParseConfig(src, f, hcl.InitialPos); d.HasErrors() {
					diags = append(diags, d...)
					continue
				}
				out := hclwrite.Format(src)
				if bytes.Equal(out, src) {
					continue
				}
				unformatted = append(unformatted, f)
				if check {
					continue
				}
				fi, err := os.Stat(f)
				if err != nil {
					return err
				}
				if err := durable.WriteFile(f, out, fi.Mode().Perm()); err != nil {
					return fmt.Errorf("fmt %s: %w", f, err)
				}
			}
			for _, f := range unformatted {
				fmt.Fprintln(app.Env.Stdout, f)
			}
			if len(diags) > 0 {
				app.printDiags(app.Env.Stderr, &loaded{diags: diags})
				return &silentExit{code: ExitError}
			}
			if check && len(unformatted) > 0 {
				fmt.Fprintf(app.Env.Stderr, "%d file(s) need formatting: run sysbox fmt\n", len(unformatted))
				return &silentExit{code: ExitError}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "only report unformatted files (exit 1 if any)")
	return cmd
}

func isHCLFile(name string) bool {
	return strings.HasSuffix(name, ".sysbox.hcl") || strings.HasSuffix(name, ".sysbox.vars.hcl")
}

// hclFiles expands directories (recursively, skipping dot-directories such as .sysbox).
func hclFiles(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			out = append(out, a)
			continue
		}
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != a && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if !d.IsDir() && isHCLFile(d.Name()) {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	return out, nil
}
