package backends

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/http"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/backend/postgres"
	"zyvor.dev/sysbox/internal/backend/sqlite"
)

type opener func(ctx context.Context, settings map[string]string) (backend.Backend, error)

var kinds = map[string]opener{
	"local": func(_ context.Context, s map[string]string) (backend.Backend, error) { return local.Open(s) },
	"sqlite": func(ctx context.Context, s map[string]string) (backend.Backend, error) {
		return sqlite.Open(ctx, s)
	},
	"postgres": func(ctx context.Context, s map[string]string) (backend.Backend, error) {
		return postgres.Open(ctx, s)
	},
	"http": func(_ context.Context, s map[string]string) (backend.Backend, error) { return http.Open(s) },
}

// Kinds lists the backend kinds Open knows, sorted.
func Kinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Open opens the backend of kind with its settings:
//
//	local     path (default sysbox.sbxstate)
//	sqlite    path (default sysbox.state.db), name (default "default")
//	postgres  dsn, name (default "default")
//	http      address
//
// An unknown kind lists the known ones.
func Open(ctx context.Context, kind string, settings map[string]string) (backend.Backend, error) {
	open, ok := kinds[kind]
	if !ok {
		return nil, fmt.Errorf("state backend %q: unknown kind (known: %s)", kind, strings.Join(Kinds(), ", "))
	}
	return open(ctx, settings)
}
