// Package kubernetes holds Tsubame's Kubernetes manifests and their checks.
// No cluster is needed: every document is decoded strictly into the typed
// objects of k8s.io/api (an unknown or misplaced field is an error), then
// checked against the server's configuration and against each other.
package kubernetes

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"tsubame/internal/config"
)

// objects are the decoded documents of a directory, by kind and name.
type objects struct {
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	policies     map[string]*networkingv1.NetworkPolicy
	// kustomization is the directory's kustomization.yaml, if any.
	kustomization *kustomization
}

// kustomization is what kustomization.yaml may hold here: the manifests
// and the image they run. Strict decoding refuses any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// kinds maps apiVersion/kind to a decoder into the typed object.
var kinds = map[string]func(o *objects, doc []byte) (string, error){
	"apps/v1/StatefulSet": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.statefulSets, func(v *appsv1.StatefulSet) string { return v.Name })
	},
	"kustomize.config.k8s.io/v1beta1/Kustomization": func(o *objects, doc []byte) (string, error) {
		k := new(kustomization)
		if err := yaml.UnmarshalStrict(doc, k); err != nil {
			return "", err
		}
		if o.kustomization != nil {
			return "", fmt.Errorf("two kustomizations")
		}
		o.kustomization = k
		return "kustomization", nil
	},
	"apps/v1/Deployment": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.deployments, func(v *appsv1.Deployment) string { return v.Name })
	},
	"v1/Service": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.services, func(v *corev1.Service) string { return v.Name })
	},
	"v1/ConfigMap": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.configMaps, func(v *corev1.ConfigMap) string { return v.Name })
	},
	"policy/v1/PodDisruptionBudget": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.pdbs, func(v *policyv1.PodDisruptionBudget) string { return v.Name })
	},
	"autoscaling/v2/HorizontalPodAutoscaler": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.hpas, func(v *autoscalingv2.HorizontalPodAutoscaler) string { return v.Name })
	},
	"networking.k8s.io/v1/NetworkPolicy": func(o *objects, doc []byte) (string, error) {
		return decode(doc, o.policies, func(v *networkingv1.NetworkPolicy) string { return v.Name })
	},
}

func decode[T any](doc []byte, into map[string]*T, name func(*T) string) (string, error) {
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return "", err
	}
	n := name(v)
	if n == "" {
		return "", fmt.Errorf("no metadata.name")
	}
	if _, dup := into[n]; dup {
		return "", fmt.Errorf("%s defined twice", n)
	}
	into[n] = v
	return n, nil
}

// load decodes every .yaml file in dir (not below it).
func load(t *testing.T, dir string) *objects {
	t.Helper()
	o := &objects{
		statefulSets: map[string]*appsv1.StatefulSet{},
		deployments:  map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, policies: map[string]*networkingv1.NetworkPolicy{},
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(b) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s document %d: %v", file, i+1, err)
			}
			dec, ok := kinds[head.APIVersion+"/"+head.Kind]
			if !ok {
				t.Fatalf("%s document %d: unexpected %s %s", file, i+1, head.APIVersion, head.Kind)
			}
			if _, err := dec(o, doc); err != nil {
				t.Fatalf("%s document %d (%s): %v", file, i+1, head.Kind, err)
			}
		}
	}
	return o
}

// splitDocuments splits a YAML stream at "---" lines, dropping documents
// that hold only comments.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	for _, doc := range bytes.Split(append([]byte("\n"), b...), []byte("\n---\n")) {
		for _, line := range strings.Split(string(doc), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				docs = append(docs, doc)
				break
			}
		}
	}
	return docs
}

// Every document decodes strictly; a misspelt field is caught.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	o := load(t, ".")
	if len(o.statefulSets) != 1 || len(o.deployments) != 0 || len(o.services) != 3 || len(o.configMaps) != 1 || len(o.pdbs) != 1 ||
		len(o.hpas) != 1 || len(o.policies) != 1 || o.kustomization == nil {
		t.Fatalf("unexpected set of objects: %+v", o)
	}
	b, err := os.ReadFile("statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte("readinessProbe:"), []byte("readynessProbe:"), 1)
	if _, err := kinds["apps/v1/StatefulSet"](&objects{statefulSets: map[string]*appsv1.StatefulSet{}}, bad); err == nil ||
		!strings.Contains(err.Error(), "readynessProbe") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
	b, err = os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad = bytes.Replace(b, []byte("newTag:"), []byte("newTags:"), 1)
	if _, err := kinds["kustomize.config.k8s.io/v1beta1/Kustomization"](&objects{}, bad); err == nil || !strings.Contains(err.Error(), "newTags") {
		t.Fatalf("a misspelt kustomization field decoded: %v", err)
	}
}

// serverConfig loads the configuration the pods run with: the ConfigMap's
// file and the container's literal environment.
func serverConfig(t *testing.T, o *objects, c *corev1.Container) *config.Config {
	t.Helper()
	cm := o.configMaps["tsubame"]
	if cm == nil {
		t.Fatal("no ConfigMap tsubame")
	}
	var environ []string
	confPath := ""
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, config.EnvPrefix) {
			continue
		}
		if _, known := config.EnvKeys()[e.Name]; !known && e.Name != config.EnvConfigFile {
			t.Errorf("env %s is not a configuration key", e.Name)
		}
		switch {
		case e.Name == config.EnvConfigFile:
			confPath = e.Value
		case e.ValueFrom == nil:
			environ = append(environ, e.Name+"="+e.Value)
		}
	}
	// The file is the ConfigMap's key named like the path, mounted at its
	// directory.
	dir, name := filepath.Split(confPath)
	mounted := false
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(dir) {
			for _, v := range o.statefulSets["tsubame"].Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
					mounted = true
				}
			}
		}
	}
	if !mounted {
		t.Fatalf("%s=%q is not the ConfigMap mounted", config.EnvConfigFile, confPath)
	}
	text, ok := cm.Data[name]
	if !ok {
		t.Fatalf("ConfigMap has no %s", name)
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := config.Load(file, environ)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the pods' configuration: %v %q", err, warnings)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatalf("the pods' configuration: %v", errs)
	}
	return cfg
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container has no port %q", name)
	return 0
}

func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen %q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("listen %q: %v", addr, err)
	}
	return int32(n)
}

// selects reports whether a selector matches the pod template's labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The StatefulSet runs the server the way its configuration says, probes
// the right paths on the right port, drains before the kubelet kills it,
// runs unprivileged, and the Services, budget, autoscaler and policy all
// point at its pods.
func TestStatefulSetMatchesServer(t *testing.T) {
	o := load(t, ".")
	d := o.statefulSets["tsubame"]
	if d == nil {
		t.Fatal("no StatefulSet tsubame")
	}
	pod := d.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := &pod.Spec.Containers[0]
	cfg := serverConfig(t, o, c)

	if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Error("the StatefulSet's selector does not match its pods")
	}
	if r := d.Spec.Replicas; r == nil || *r < 2 {
		t.Error("fewer than two replicas")
	}
	if d.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Error("updates do not roll one pod at a time")
	}
	if hs := o.services[d.Spec.ServiceName]; hs == nil || hs.Spec.ClusterIP != corev1.ClusterIPNone || !selects(hs.Spec.Selector, pod.Labels) {
		t.Errorf("serviceName %q is not a headless Service over the pods", d.Spec.ServiceName)
	}

	// Ports and probes.
	if got, want := containerPort(t, c, "http"), listenPort(t, cfg.Listen); got != want {
		t.Errorf("container port http %d, server listens on %d", got, want)
	}
	if got, want := containerPort(t, c, "admin"), listenPort(t, cfg.Admin.Listen); got != want {
		t.Errorf("container port admin %d, admin listens on %d", got, want)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: not an HTTP probe", name)
			return
		}
		if p.HTTPGet.Path != path || p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s: %s on %s, want %s on the public port", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("startup", c.StartupProbe, "/healthz")

	// Stopping: the endpoint leaves the load balancers (preStop), then the
	// server drains, all within the grace period.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 3 {
		t.Fatal("no preStop pause of a few seconds")
	}
	// server.shutdown_timeout bounds the requests, the log's close and
	// the shipper's drain together; webhooks drain on a bound of their own.
	pause := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	stop := cfg.Server.ShutdownTimeout
	if cfg.Webhook.Enabled() {
		stop += cfg.Webhook.DrainTimeout
	}
	grace := pod.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second < pause+stop+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v leaves too little for the pause %v and the stop %v", grace, pause, stop)
	}

	// Unprivileged, read-only, nothing extra.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod is not non-root (65532) under the runtime's seccomp profile")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Error("the container may escalate, write its root filesystem or keep capabilities")
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the pod mounts a service account token it does not use")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("no CPU request (the autoscaler's 100 %) or memory request and limit")
	}
	if limit := c.Resources.Limits.Memory().Value(); limit < 2*int64(cfg.Cache.MaxBytes) {
		t.Errorf("memory limit %d is under twice cache.max_bytes %d", limit, cfg.Cache.MaxBytes)
	}

	// Every directory the server writes is a writable volume of the pod's
	// own, from a claim template: it outlives the pod, so lines not yet
	// shipped survive a deletion or an eviction, and the pod that comes
	// back under the same name finds them, with the shipper's state file.
	claims := map[string]bool{}
	for _, pvc := range d.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
		if pvc.Spec.Resources.Requests.Storage().IsZero() || !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) {
			t.Errorf("claim template %s: no size or not ReadWriteOnce", pvc.Name)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if claims[v.Name] {
			t.Errorf("volume %s is both a pod volume and a claim template", v.Name)
		}
	}
	for what, path := range map[string]string{"data_dir": cfg.DataDir, "access_log.dir": cfg.AccessLog.Dir,
		"access_log.fallback_dir": cfg.AccessLog.FallbackDir, "access_log.kafka.state_file": cfg.AccessLog.KafkaStatePath()} {
		on := ""
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly && (path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")) {
				on = m.Name
			}
		}
		switch {
		case on == "":
			t.Errorf("%s %q is not on a writable volume (the root filesystem is read-only)", what, path)
		case !claims[on]:
			t.Errorf("%s %q is on volume %s, which goes with the pod: not a claim template", what, path, on)
		}
	}
	if p := d.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Error("the volumes of a removed pod may be deleted with lines not yet shipped: want whenScaled and whenDeleted Retain")
	}

	// The lines leave the pod: Kafka ships the file log, under record ids
	// that name the pod (its host name, stable in a StatefulSet), so a
	// replacement that resends a line resends it under the same id.
	if !cfg.AccessLog.Kafka.Enabled() || !cfg.UsesLog(config.LogFile) {
		t.Error("access_log.kafka is not set, or no endpoint writes the file log it ships")
	}
	if cfg.AccessLog.Kafka.NodeID != "" {
		t.Errorf("access_log.kafka.node_id %q is the same in every pod: leave it empty (the pod's name)", cfg.AccessLog.Kafka.NodeID)
	}
	if cfg.AccessLog.Kafka.SASL.Password != "" {
		t.Error("a Kafka password in the ConfigMap")
	}

	// What points at the pods.
	svc := o.services["tsubame"]
	if svc == nil || !selects(svc.Spec.Selector, pod.Labels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Error("the Service tsubame does not send to the pods' public port")
	} else if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal && len(cfg.Server.TrustedProxies) == 0 {
		t.Error("the Service hides client addresses (externalTrafficPolicy) and no trusted_proxies are set")
	}
	admin := o.services["tsubame-admin"]
	if admin == nil || !selects(admin.Spec.Selector, pod.Labels) || admin.Spec.Type != corev1.ServiceTypeClusterIP ||
		len(admin.Spec.Ports) != 1 || admin.Spec.Ports[0].TargetPort != intstr.FromString("admin") {
		t.Error("the Service tsubame-admin is not a cluster-internal route to the admin port")
	}
	pdb := o.pdbs["tsubame"]
	if pdb == nil || pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, pod.Labels) ||
		pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Error("the PodDisruptionBudget does not keep all but one pod")
	}
	hpa := o.hpas["tsubame"]
	if hpa == nil || hpa.Spec.ScaleTargetRef.APIVersion != "apps/v1" || hpa.Spec.ScaleTargetRef.Kind != "StatefulSet" || hpa.Spec.ScaleTargetRef.Name != d.Name ||
		hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
		t.Error("the autoscaler does not scale the StatefulSet from at least two replicas")
	}
	np := o.policies["tsubame"]
	if np == nil || !selects(np.Spec.PodSelector.MatchLabels, pod.Labels) {
		t.Fatal("the NetworkPolicy does not cover the pods")
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port != nil && *p.Port == intstr.FromString("admin") && len(rule.From) == 0 {
				t.Error("the NetworkPolicy opens the admin port to everyone")
			}
		}
	}
}

// The Redis example is what the Deployment's configuration reaches, the
// store of docs/scale-out.md.
func TestRedisExampleMatchesConfiguration(t *testing.T) {
	o := load(t, ".")
	c := &o.statefulSets["tsubame"].Spec.Template.Spec.Containers[0]
	cfg := serverConfig(t, o, c)
	if cfg.Store.Type != "redis" || len(cfg.Store.Redis.Addrs) == 0 {
		t.Fatalf("store %q %v: the replicas do not share a Redis", cfg.Store.Type, cfg.Store.Redis.Addrs)
	}
	r := load(t, "redis")
	host, port, err := net.SplitHostPort(cfg.Store.Redis.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	svc := r.services[host]
	if svc == nil {
		t.Fatalf("store.redis.addrs names %q; the example defines no such Service", host)
	}
	dep := r.deployments[host]
	if dep == nil || !selects(svc.Spec.Selector, dep.Spec.Template.Labels) {
		t.Fatalf("the Service %s selects no Redis pods", host)
	}
	found := false
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == port {
			found = true
			if target := p.TargetPort.String(); target != "redis" || containerPort(t, &dep.Spec.Template.Spec.Containers[0], "redis") != 6379 {
				t.Errorf("Service port %s goes to %s", port, target)
			}
		}
	}
	if !found {
		t.Errorf("the Service %s has no port %s", host, port)
	}
	// docs/scale-out.md documents this store and links the example.
	doc, err := os.ReadFile("../../docs/scale-out.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type: redis", "key_prefix: \"" + cfg.Store.Redis.KeyPrefix + "\"", "deploy/kubernetes"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/scale-out.md lacks %q", want)
		}
	}
	// The password comes from a Secret, never from the ConfigMap.
	if cfg.Store.Redis.Password != "" {
		t.Error("a Redis password in the ConfigMap")
	}
	secret := false
	for _, e := range c.Env {
		if e.Name == "TSUBAME_STORE_REDIS_PASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secret = true
		}
	}
	if !secret {
		t.Error("the Redis password is not read from a Secret")
	}
}

// kubectl apply -k applies every manifest here with the image make image
// builds: kustomization.yaml lists them all and sets the image the
// StatefulSet names (make image's repository) to a version, never latest.
func TestKustomizationAppliesTheImageMakeBuilds(t *testing.T) {
	o := load(t, ".")
	k := o.kustomization
	if k == nil {
		t.Fatal("no kustomization.yaml")
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, files) {
		t.Errorf("kustomization.yaml lists %v, the directory holds %v", got, files)
	}

	// make image's default: IMAGE ?= <repository>:$(VERSION).
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	repo := ""
	for line := range strings.Lines(string(mk)) {
		if rest, ok := strings.CutPrefix(line, "IMAGE "); ok {
			v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), "?="))
			if r, ok := strings.CutSuffix(v, ":$(VERSION)"); ok {
				repo = r
			}
		}
	}
	if repo == "" {
		t.Fatal("the Makefile has no IMAGE ?= <repository>:$(VERSION)")
	}
	image := o.statefulSets["tsubame"].Spec.Template.Spec.Containers[0].Image
	if image != repo {
		t.Errorf("the StatefulSet names image %q; make image builds %s:<version> (the tag comes from kustomization.yaml)", image, repo)
	}
	if len(k.Images) != 1 || k.Images[0].Name != image || k.Images[0].NewTag == "" || k.Images[0].NewTag == "latest" {
		t.Errorf("kustomization.yaml images %+v: want %s set to a version", k.Images, image)
	}
	// docs/deploy.md applies the manifests with -k.
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "kubectl apply -k deploy/kubernetes/") || strings.Contains(string(doc), "kubectl apply -f deploy/kubernetes/\n") {
		t.Error("docs/deploy.md does not apply the manifests with kubectl apply -k")
	}
}
