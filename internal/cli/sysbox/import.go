package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/executor"
)

func init() { register(newImportCommand) }

func newImportCommand(app *App) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "import ADDR EXTERNAL_ID",
		Short: "Adopt an existing object into state",
		Long: `import adopts the existing object EXTERNAL_ID as the configured resource ADDR through the import
rule of the driver ADDR selects, and records it in state with the attributes the configuration
gives it (generation 1). ADDR must be in the configuration and not yet in state. An object that
carries another resource's sysbox markers is refused, naming that topology and address. What
EXTERNAL_ID is, and how ownership is proven, depends on the kind and the driver:

sysbox_node
  netns   EXTERNAL_ID is a named namespace (/run/netns/EXTERNAL_ID). One with no sysbox marker
          and an empty loopback alias is unclaimed: the import is the claim, and sysbox writes
          this topology's ownership markers onto it then. One already marked for the same
          topology, address and type is re-marked; any other marker is refused.
  docker  EXTERNAL_ID is a container. Docker cannot add labels to an existing container, so
          sysbox writes nothing onto it: the container must have been created with this
          topology's ownership labels (dev.zyvor.sysbox.topology, .address, .type and
          .generation=1) and --network none. A refused import prints the exact --label flags.
  libvirt EXTERNAL_ID is a domain name or UUID. sysbox writes nothing onto it: its definition
          must carry sysbox's <metadata> owner element for this topology, address, type and
          generation 1 (a refused import prints it), run on one qcow2 overlay (its backing
          chain's root is the baseline) and have the guest agent channel; NICs only on taps
          sysbox made for this node.
sysbox_network
  netns   EXTERNAL_ID is a Linux bridge in the host namespace. Unmarked (empty alias) or marked
          for the same resource: claimed, marked, its MAC pinned and its forward-accept rule
          added as apply would; it keeps its name.
sysbox_firewall, sysbox_router
  nftables EXTERNAL_ID is a table of family ip inside the rule's node, which must be in state
          already. Marked for the same resource: adopted untouched (refresh and plan then say
          whether it matches the configuration). Unmarked: claimed by replacing it atomically
          with the declared policy under its own name.
sysbox_artifact
  any     EXTERNAL_ID is the digest (sha256:...) or driver reference (an image id) the declared
          source resolves to now; anything else is refused. Nothing is written.

Anything less is incomplete evidence: the import fails and nothing is touched.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := parseAddrArg("address", args[0])
			if err != nil {
				return err
			}
			rt, err := app.openRuntime(cmd.Context(), &f, true)
			if err != nil {
				return err
			}
			defer rt.close()
			desired, _, err := rt.desired(cmd.Context())
			if err != nil {
				return err
			}
			var want *executor.Action
			for i := range desired {
				if desired[i].Addr.Equal(addr) {
					want = &desired[i]
				}
			}
			if want == nil {
				return fmt.Errorf("import %s: not in the configuration; add the resource block first", addr)
			}
			r, err := rt.ex.Import(cmd.Context(), *want, args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Env.Stdout, "Imported %s as %s (driver %s, %d attachment(s)).\n", args[1], r.Addr, r.Driver, len(r.Attachments))
			return nil
		},
	}
	addRunFlags(cmd, &f)
	return cmd
}
