package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
)

// printRouting is `get routers [NAME]` and `get routes [-n NAMESPACE]` as tables.
func printRouting(ctx context.Context, c *api.Client, typ, meshName, name, namespace string, stdout io.Writer) error {
	routes, err := c.List(ctx, meshName, "routes")
	if err != nil {
		return err
	}
	if typ == "routes" {
		if namespace != "" {
			routes = api.InNamespace(routes, namespace)
		}
		return api.PrintRoutes(stdout, routes, time.Now())
	}
	var routers []api.Resource
	if name != "" {
		r, err := c.Get(ctx, meshName, "routers", name)
		if err != nil {
			return err
		}
		routers = []api.Resource{r}
	} else if routers, err = c.List(ctx, meshName, "routers"); err != nil {
		return err
	}
	return api.PrintRouters(stdout, routers, routes)
}

// describeExample ends describe --help: run as written by a test on the bundled files.
const describeExample = `Examples (the control plane on etcd of kuma-cp get --help; a router shard and a route on it;
then the bundled MeshExternalServices and HostnameGenerators: which generator names ext-svc, and why the others do not):
  kuma-cp apply --wait -f testdata/routes/shard-a.yaml --admin-token-file /tmp/cp/admin.token
  kuma-cp describe route web -n shop
  kuma-cp describe router shard-a
  kuma-cp apply -f testdata/mesh/policies/meshexternalservices.yaml -f testdata/mesh/policies/hostnamegenerators.yaml --admin-token-file /tmp/cp/admin.token
  kuma-cp describe meshexternalservice ext-svc
`

// describe is `describe route|router|meshexternalservice NAME`.
func (k *command) describe(ctx context.Context) int {
	args, meshName, namespace := k.fs.Args(), k.f.mesh, k.f.namespace
	if len(args) != 2 {
		return k.usage("want: describe route|router|meshexternalservice NAME (a route: NAME -n NAMESPACE, or name.namespace)")
	}
	if meshName == "*" {
		return k.usage("--mesh \"*\" lists every mesh: describe %s NAME needs one mesh (--mesh M)", args[0])
	}
	switch strings.TrimSuffix(strings.ToLower(args[0]), "s") {
	case "route":
		name := args[1]
		if namespace != "" {
			name += "." + namespace
		} else if !strings.Contains(name, ".") {
			return k.usage("route %q: give its namespace (-n NAMESPACE, or name.namespace)", name)
		}
		r, err := k.c.Get(ctx, meshName, "routes", name)
		if err != nil {
			return k.fail(err)
		}
		bs, err := k.c.List(ctx, meshName, "routebindings")
		if err != nil {
			return k.fail(err)
		}
		if err := api.DescribeRoute(k.stdout, r, bs); err != nil {
			return k.fail(err)
		}
	case "router":
		if namespace != "" {
			return k.usage("-n %q: a router has no namespace (-n is for describe route)", namespace)
		}
		r, err := k.c.Get(ctx, meshName, "routers", args[1])
		if err != nil {
			return k.fail(err)
		}
		routes, err := k.c.List(ctx, meshName, "routes")
		if err != nil {
			return k.fail(err)
		}
		if err := api.DescribeRouter(k.stdout, r, routes); err != nil {
			return k.fail(err)
		}
	case "meshexternalservice", "mes":
		r, err := k.c.Get(ctx, meshName, "meshexternalservices", args[1])
		if err != nil {
			return k.fail(err)
		}
		gens, err := k.c.List(ctx, meshName, "hostnamegenerators")
		if err != nil {
			return k.fail(err)
		}
		if meshName != "default" { // the generators for every mesh are stored under default
			all, err := k.c.List(ctx, "default", "hostnamegenerators")
			if err != nil {
				return k.fail(err)
			}
			gens = append(gens, all...)
		}
		if err := api.DescribeMeshExternalService(k.stdout, r, gens); err != nil {
			return k.fail(err)
		}
	default:
		return k.usage("describe %q: want route, router or meshexternalservice", args[0])
	}
	return ExitOK
}

// waitRoutes is `apply --wait`: each applied route is polled until it is scheduled; its
// final DNS name is printed, or, at the timeout, why it is not scheduled yet.
func waitRoutes(ctx context.Context, c *api.Client, applied []api.Applied, timeout time.Duration, stdout io.Writer) error {
	deadline := time.Now().Add(timeout)
	var late []string
	for _, a := range applied {
		if a.Type != "routes" {
			continue
		}
		for {
			r, err := c.Get(ctx, a.Mesh, "routes", a.Name)
			if err != nil {
				return err
			}
			st, err := api.RouteStateOf(r)
			if err != nil {
				return err
			}
			if st.Scheduled {
				fmt.Fprintf(stdout, "route %s scheduled on router %s: %s", a.Name, st.Router, st.DNS)
				if st.User && st.Canonical != "" {
					fmt.Fprintf(stdout, " (point it at %s with a CNAME)", st.Canonical)
				}
				fmt.Fprintf(stdout, ", admitted %s\n", st.Admitted)
				break
			}
			if time.Now().After(deadline) {
				why := "waiting for the scheduler (is a kuma-cp replica leading?)"
				if st.Reason != "" {
					why = st.Reason + ": " + st.Message
				}
				fmt.Fprintf(stdout, "route %s not scheduled yet: %s\n", a.Name, why)
				late = append(late, a.Name)
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if len(late) > 0 {
		return fmt.Errorf("%d route(s) not scheduled within %s: %s", len(late), timeout, strings.Join(late, ", "))
	}
	return nil
}
