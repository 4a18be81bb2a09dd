package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// TestKubernetes builds deploy/kubernetes with kustomize's Go API (what
// kubectl apply -k runs) and checks every workload, the NATS cluster and the
// scaling on consumer lag.
func TestKubernetes(t *testing.T) {
	failAll(t, checkKubernetes(t, repoRoot))
}

// TestKubernetesNATSConfigIsDeploys keeps the kustomization's copy of
// nats-server.conf equal to deploy/nats-server.conf, which internal/auth generates
// (kustomize reads no file outside the kustomization's directory).
func TestKubernetesNATSConfigIsDeploys(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(repoRoot, "deploy", "kubernetes", "nats", "nats-server.conf")
	if *update {
		if err := os.WriteFile(copyPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/kubernetes/nats/nats-server.conf differs from deploy/nats-server.conf (regenerated from internal/auth?): run go test ./deploy -update")
	}
}

// probeTODO is the annotation a pod carries instead of probes while its
// binary serves no health endpoint.
const probeTODO = "rath.openrath.dev/probes"

// The parts of Kubernetes objects the checks read (JSON field names).
type (
	object struct {
		Kind     string `json:"kind"`
		Metadata meta   `json:"metadata"`
	}
	meta struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	}
	workload struct {
		object
		Spec struct {
			Replicas    *int   `json:"replicas"`
			ServiceName string `json:"serviceName"`
			Template    struct {
				Metadata meta    `json:"metadata"`
				Spec     podSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	podSpec struct {
		Containers []container `json:"containers"`
		Volumes    []struct {
			Name   string `json:"name"`
			Secret *struct {
				SecretName string `json:"secretName"`
				Items      []struct {
					Key  string `json:"key"`
					Path string `json:"path"`
				} `json:"items"`
			} `json:"secret"`
			ConfigMap *struct {
				Name string `json:"name"`
			} `json:"configMap"`
		} `json:"volumes"`
	}
	container struct {
		Name    string   `json:"name"`
		Image   string   `json:"image"`
		Command []string `json:"command"`
		Args    []string `json:"args"`
		Env     []struct {
			Name string `json:"name"`
		} `json:"env"`
		Resources struct {
			Requests map[string]any `json:"requests"`
			Limits   map[string]any `json:"limits"`
		} `json:"resources"`
		LivenessProbe  *probe `json:"livenessProbe"`
		ReadinessProbe *probe `json:"readinessProbe"`
		StartupProbe   *probe `json:"startupProbe"`
		VolumeMounts   []struct {
			Name      string `json:"name"`
			MountPath string `json:"mountPath"`
		} `json:"volumeMounts"`
		Ports []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `json:"path"`
			Port any    `json:"port"`
		} `json:"httpGet"`
	}
	service struct {
		object
		Spec struct {
			ClusterIP string `json:"clusterIP"`
			Ports     []struct {
				Port int `json:"port"`
			} `json:"ports"`
		} `json:"spec"`
	}
	scaledObject struct {
		object
		Spec struct {
			ScaleTargetRef struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"scaleTargetRef"`
			Triggers []struct {
				Type     string            `json:"type"`
				Metadata map[string]string `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	configMap struct {
		object
		Data map[string]string `json:"data"`
	}
)

// kustomize builds dir and decodes every resource into its JSON form.
func kustomize(dir string) (resmap.ResMap, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	return k.Run(filesys.MakeFsOnDisk(), dir)
}

func decode(r map[string]any, into any) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func checkKubernetes(t *testing.T, root string) []error {
	t.Helper()
	bins := binaries(t)
	m := credentials(t)
	dir := filepath.Join(root, "deploy", "kubernetes")
	rm, err := kustomize(dir)
	if err != nil {
		return []error{fmt.Errorf("kustomize build %s: %v", dir, err)}
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	workloads := map[string]workload{} // kind/name
	services := map[string]service{}
	configMaps := map[string]configMap{}
	var scaled []scaledObject
	for _, r := range rm.Resources() {
		obj, err := r.Map()
		if err != nil {
			return []error{err}
		}
		where := r.GetKind() + " " + r.GetName()
		errs = append(errs, schemaErrors(where, r.GetApiVersion(), r.GetKind(), obj)...)
		var err2 error
		switch r.GetKind() {
		case "Deployment", "StatefulSet":
			var w workload
			err2 = decode(obj, &w)
			workloads[w.Kind+"/"+w.Metadata.Name] = w
		case "Service":
			var s service
			err2 = decode(obj, &s)
			services[s.Metadata.Name] = s
		case "ConfigMap":
			var c configMap
			err2 = decode(obj, &c)
			configMaps[c.Metadata.Name] = c
		case "ScaledObject":
			var s scaledObject
			err2 = decode(obj, &s)
			scaled = append(scaled, s)
		}
		if err2 != nil {
			fail("%s: %v", where, err2)
		}
	}

	// The NATS cluster.
	var nats *workload
	for _, w := range workloads {
		for _, c := range w.Spec.Template.Spec.Containers {
			if strings.HasPrefix(c.Image, "nats:") {
				nats = &w
			}
		}
	}
	namespace := ""
	if nats == nil {
		fail("no NATS workload (a container of image nats:...)")
	} else {
		namespace = nats.Metadata.Namespace
		errs = append(errs, checkNATSWorkload(t, *nats, services, configMaps, m)...)
	}

	// The Rath services.
	byBinary := map[string]workload{}
	count := map[string]int{}
	for _, key := range slices.Sorted(maps.Keys(workloads)) {
		w := workloads[key]
		where := key
		spec := w.Spec.Template.Spec
		for _, c := range spec.Containers {
			cwhere := where + " container " + c.Name
			if c.Resources.Requests["cpu"] == nil || c.Resources.Requests["memory"] == nil || c.Resources.Limits["memory"] == nil {
				fail("%s: needs resources: requests.cpu, requests.memory and limits.memory", cwhere)
			}
			if strings.HasPrefix(c.Image, "nats:") {
				continue
			}
			cmd, cerrs := parseCommand(cwhere, append(slices.Clone(c.Command), c.Args...), bins)
			errs = append(errs, cerrs...)
			if cmd.bin == nil {
				continue
			}
			b := cmd.bin
			byBinary[b.name] = w
			if w.Spec.Replicas != nil {
				count[b.name] += *w.Spec.Replicas
			} else {
				count[b.name]++
			}
			if c.Image != "rath/"+b.name && !strings.HasPrefix(c.Image, "rath/"+b.name+":") {
				fail("%s: image %s, want rath/%s (deploy/Dockerfile --target %s)", cwhere, c.Image, b.name, b.name)
			}
			// $(VAR) in a command is expanded only from the container's env.
			for _, a := range append(slices.Clone(c.Command), c.Args...) {
				for _, v := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
					if !slices.ContainsFunc(c.Env, func(e struct {
						Name string `json:"name"`
					}) bool {
						return e.Name == v[1]
					}) {
						fail("%s: %q refers to $(%s), which the container's env does not define", cwhere, a, v[1])
					}
				}
			}
			for _, e := range c.Env {
				if !b.readsEnv(e.Name) && !slices.ContainsFunc(append(slices.Clone(c.Command), c.Args...), func(a string) bool {
					return strings.Contains(a, "$("+e.Name+")")
				}) {
					fail("%s: sets %s, which %s does not read and its command does not use", cwhere, e.Name, b.name)
				}
			}
			_, serves := b.flags["http"]
			probes := c.LivenessProbe != nil && c.ReadinessProbe != nil
			switch {
			case serves && !probes:
				fail("%s: %s accepts --http now (issue 14 item 2): give it liveness and readiness probes on /healthz and /readyz", cwhere, b.name)
			case !serves && !probes && !strings.HasPrefix(w.Spec.Template.Metadata.Annotations[probeTODO], "TODO(issue 14 item 2)"):
				fail("%s: no probes, and no %s annotation saying why (TODO(issue 14 item 2): %s serves no health endpoint yet)", cwhere, probeTODO, b.name)
			case !serves && (c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil):
				fail("%s: probes, but %s serves no health endpoint (no --http flag)", cwhere, b.name)
			case serves:
				for _, pr := range []*probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
					if err := probeOnHTTP(c, pr, cmd.flags["http"]); err != nil {
						fail("%s: %v", cwhere, err)
					}
				}
			}
			errs = append(errs, kubeCreds(cwhere, spec, c, cmd)...)
			if u := cmd.flags["nats"]; !strings.Contains(u, "://") {
				fail("%s: --nats %q is not a URL", cwhere, u)
			} else if host, port, _ := net.SplitHostPort(strings.SplitN(u, "://", 2)[1]); port != fmt.Sprint(natsClientPort) || !slices.ContainsFunc(services[host].Spec.Ports, func(p struct {
				Port int `json:"port"`
			}) bool {
				return p.Port == natsClientPort
			}) {
				fail("%s: --nats %q is not a Service of the NATS client port %d", cwhere, u, natsClientPort)
			}
			if _, ok := b.flags["replicas"]; ok && cmd.flags["replicas"] != fmt.Sprint(natsNodes) {
				fail("%s: --replicas %q, want %d on a %d-node cluster", cwhere, cmd.flags["replicas"], natsNodes, natsNodes)
			}
			if b.name == "session-ledger" {
				errs = append(errs, kubeMounted(cwhere, spec, c, cmd.flags["key"], "rath-ledger-key")...)
			}
		}
	}
	for svc, n := range minimum {
		if count[svc] < n {
			fail("deploy/kubernetes runs %d %s, want at least %d", count[svc], svc, n)
		}
	}
	if w, ok := byBinary["tool-runner"]; ok && w.Kind != "StatefulSet" {
		fail("%s/%s: the tool runner keeps workspaces on its disk and hands calls over by host name: run it as a StatefulSet", w.Kind, w.Metadata.Name)
	}

	// Scaling on consumer lag: each worker with a durable consumer is scaled
	// by a ScaledObject on it.
	owners := durables(t) // durable → services/<dir>
	scaledTargets := map[string]bool{}
	for _, s := range scaled {
		where := "ScaledObject " + s.Metadata.Name
		ref := s.Spec.ScaleTargetRef
		w, ok := workloads[ref.Kind+"/"+ref.Name]
		if !ok {
			fail("%s: scales %s/%s, which the kustomization does not define", where, ref.Kind, ref.Name)
			continue
		}
		if len(s.Spec.Triggers) == 0 {
			fail("%s: no triggers", where)
		}
		for _, tr := range s.Spec.Triggers {
			md := tr.Metadata
			if tr.Type != "nats-jetstream" {
				fail("%s: trigger %q, want nats-jetstream (lag of a durable consumer)", where, tr.Type)
				continue
			}
			owner, known := owners[md["consumer"]]
			switch {
			case !known:
				fail("%s: consumer %q is no durable consumer of the services' code (they have %v)", where, md["consumer"], slices.Sorted(maps.Keys(owners)))
			case md["stream"] != events.StreamSessions:
				fail("%s: stream %q, want %s (the workers' consumers are on it)", where, md["stream"], events.StreamSessions)
			case md["account"] != auth.Account:
				fail("%s: account %q, want %s (deploy/nats-server.conf)", where, md["account"], auth.Account)
			case len(w.Spec.Template.Spec.Containers) == 0 || w.Spec.Template.Spec.Containers[0].Command[0] != owner:
				fail("%s: scales %s on consumer %q, which belongs to %s", where, ref.Name, md["consumer"], owner)
			default:
				scaledTargets[owner] = true
			}
			if nats != nil {
				want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", nats.Spec.ServiceName, namespace, natsMonitorPort)
				if md["natsServerMonitoringEndpoint"] != want {
					fail("%s: natsServerMonitoringEndpoint %q, want %q (the headless service, where KEDA finds each node by its server name)", where, md["natsServerMonitoringEndpoint"], want)
				}
			}
		}
	}
	for d, owner := range owners {
		b := bins[owner]
		if b == nil || !slices.Contains(auth.Durables(b.role), d) {
			fail("durable %q of services/%s is not in internal/auth's permission table", d, owner)
		}
	}
	for _, worker := range []string{"selector", "agent-worker", "tool-runner"} {
		if !scaledTargets[worker] {
			fail("no ScaledObject scales %s on its durable consumer's lag", worker)
		}
	}
	return errs
}

// checkNATSWorkload checks the NATS StatefulSet: three nodes, probes, and
// the configuration it mounts, loaded as each node does.
func checkNATSWorkload(t *testing.T, w workload, services map[string]service, configMaps map[string]configMap, m minted) []error {
	t.Helper()
	var errs []error
	where := w.Kind + "/" + w.Metadata.Name
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(where+": "+format, args...)) }
	if w.Kind != "StatefulSet" || w.Spec.Replicas == nil || *w.Spec.Replicas != natsNodes {
		fail("want a StatefulSet of %d replicas", natsNodes)
	}
	if s, ok := services[w.Spec.ServiceName]; !ok || s.Spec.ClusterIP != "None" {
		fail("serviceName %q is no headless Service (the routes and KEDA name the nodes through it)", w.Spec.ServiceName)
	}
	c := w.Spec.Template.Spec.Containers[0]
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.LivenessProbe.HTTPGet == nil || !strings.HasPrefix(c.LivenessProbe.HTTPGet.Path, "/healthz") {
		fail("needs liveness and readiness probes on /healthz")
	}
	if !strings.HasPrefix(c.Image, "nats:2.15.") {
		fail("image %s, want nats-server 2.15.x", c.Image)
	}
	args := append(slices.Clone(c.Command), c.Args...)
	i := slices.Index(args, "-c")
	if i < 0 || i+1 >= len(args) {
		fail("args %v name no configuration (-c FILE)", args)
		return errs
	}
	conf := args[i+1]
	dir := t.TempDir()
	found := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path.Dir(conf) {
			continue
		}
		for _, v := range w.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				fail("volume %s names ConfigMap %s, which the kustomization does not make", v.Name, v.ConfigMap.Name)
				continue
			}
			for name, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					return append(errs, err)
				}
				found = found || name == path.Base(conf)
			}
		}
	}
	if !found {
		fail("-c %s is in no ConfigMap mounted at %s", conf, path.Dir(conf))
		return errs
	}
	var hosts []string
	for i := range natsNodes {
		hosts = append(hosts, fmt.Sprintf("%s-%d.%s", w.Metadata.Name, i, w.Spec.ServiceName))
	}
	opts, cerrs := natsConfig(t, where, filepath.Join(dir, path.Base(conf)), w.Metadata.Name+"-0", hosts, m)
	if opts != nil && !slices.ContainsFunc(c.VolumeMounts, func(vm struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	}) bool {
		rel, err := filepath.Rel(vm.MountPath, opts.StoreDir)
		return err == nil && !strings.HasPrefix(rel, "..")
	}) {
		fail("JetStream's store_dir %s is on no volume: a pod loses its streams when rescheduled", opts.StoreDir)
	}
	return append(errs, cerrs...)
}

// probeOnHTTP checks that a probe (if any) asks /healthz or /readyz of the
// port the container's --http listens on, by number or by port name.
func probeOnHTTP(c container, pr *probe, addr string) error {
	if pr == nil {
		return nil
	}
	if addr == "" {
		return fmt.Errorf("probes, but no --http address to serve them on")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: %v", addr, err)
	}
	if pr.HTTPGet == nil || (pr.HTTPGet.Path != "/healthz" && pr.HTTPGet.Path != "/readyz") {
		return fmt.Errorf("a probe that is no httpGet of /healthz or /readyz")
	}
	got := fmt.Sprint(pr.HTTPGet.Port)
	for _, p := range c.Ports {
		if p.Name == got {
			got = fmt.Sprint(p.ContainerPort)
		}
	}
	if got != port {
		return fmt.Errorf("a probe on port %v, but --http listens on %s", pr.HTTPGet.Port, port)
	}
	return nil
}

// kubeCreds checks that --creds is the binary's role's file in a Secret
// volume that holds that key.
func kubeCreds(where string, spec podSpec, c container, cmd command) []error {
	creds := cmd.flags["creds"]
	want := auth.FileName(cmd.bin.role)
	if creds == "" {
		return []error{fmt.Errorf("%s: no --creds: the cluster refuses connections without an identity", where)}
	}
	if path.Base(creds) != want {
		return []error{fmt.Errorf("%s: --creds %s, want the %s role's file %s", where, creds, cmd.bin.role, want)}
	}
	return kubeMounted(where, spec, c, creds, "")
}

// kubeMounted checks that file is in a Secret volume mounted into c (named
// secret, if given), whose items, if listed, include the file.
func kubeMounted(where string, spec podSpec, c container, file, secret string) []error {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path.Dir(file) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil || (secret != "" && v.Secret.SecretName != secret) {
				continue
			}
			if len(v.Secret.Items) == 0 || slices.ContainsFunc(v.Secret.Items, func(it struct {
				Key  string `json:"key"`
				Path string `json:"path"`
			}) bool {
				return it.Path == path.Base(file) && it.Key == path.Base(file)
			}) {
				return nil
			}
			return []error{fmt.Errorf("%s: Secret %s mounted at %s has no item %s", where, v.Secret.SecretName, vm.MountPath, path.Base(file))}
		}
	}
	s := "a Secret"
	if secret != "" {
		s = "the Secret " + secret
	}
	return []error{fmt.Errorf("%s: %s is in no volume of %s mounted into the container", where, file, s)}
}

// newerFields are fields of the Kubernetes API newer than the OpenAPI schema
// kyaml bundles (Kubernetes 1.21), known to be right.
var newerFields = map[string]bool{
	"appArmorProfile": true, // PodSecurityContext, Kubernetes 1.30
}

// schemaErrors reports fields of a built-in kind that its OpenAPI schema
// (kyaml's built-in Kubernetes schema) does not know: a misspelled
// livenessProbe or resources is otherwise silently dropped by the API
// server's older versions or refused at apply time. Custom kinds (KEDA's)
// have no schema here and are checked by hand above.
func schemaErrors(where, apiVersion, kind string, obj map[string]any) []error {
	rs := openapi.SchemaForResourceType(kyaml.TypeMeta{APIVersion: apiVersion, Kind: kind})
	if rs == nil {
		return nil
	}
	var errs []error
	var walk func(p string, v any, rs *openapi.ResourceSchema)
	walk = func(p string, v any, rs *openapi.ResourceSchema) {
		if rs == nil || rs.Schema == nil {
			return
		}
		switch v := v.(type) {
		case map[string]any:
			if len(rs.Schema.Properties) == 0 && (rs.Schema.AdditionalProperties == nil || rs.Schema.AdditionalProperties.Schema == nil) {
				return // free-form
			}
			for k, sub := range v {
				f := rs.Field(k)
				if f == nil {
					if !newerFields[k] {
						errs = append(errs, fmt.Errorf("%s: unknown field %s.%s (Kubernetes API schema)", where, p, k))
					}
					continue
				}
				walk(p+"."+k, sub, f)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", p, i), e, rs.Elements())
			}
		}
	}
	walk(kind, obj, rs)
	return errs
}
