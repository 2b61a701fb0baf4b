// Package envtest_test runs controller-runtime's envtest, as any Go operator's suite does,
// against the control plane in $KUBEBUILDER_ASSETS (Plinth's, from `plinth envtest-assets`).
package envtest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var widget = schema.GroupVersionKind{Group: "example.plinth.dev", Version: "v1", Kind: "Widget"}

func start(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `plinth envtest-assets DIR` and point it there")
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("testdata")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest did not stop: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return env, c
}

// A manager reconciles a custom resource installed from CRDDirectoryPaths: what an operator's
// suite does first.
func TestAManagerReconcilesACustomResource(t *testing.T) {
	env, c := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(widget)
	err = ctrl.NewControllerManagedBy(mgr).For(obj).Complete(reconcileFunc(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(widget)
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, w); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
		patch := client.MergeFrom(w.DeepCopy())
		if err := unstructured.SetNestedField(w.Object, size*2, "status", "doubled"); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, mgr.GetClient().Status().Patch(ctx, w, patch)
	}))
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped: %v", err)
		}
	}()

	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widget)
	w.SetNamespace("default")
	w.SetName("first")
	if err := unstructured.SetNestedField(w.Object, int64(21), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, w); err != nil {
		t.Fatalf("create widget: %v", err)
	}
	// The schema holds: size must be at least 1.
	bad := w.DeepCopy()
	bad.SetName("bad")
	bad.SetResourceVersion("")
	_ = unstructured.SetNestedField(bad.Object, int64(0), "spec", "size")
	if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Fatalf("a widget of size 0 was not refused as Invalid: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(widget)
		if err := c.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return false, err
		}
		doubled, found, _ := unstructured.NestedInt64(got.Object, "status", "doubled")
		return found && doubled == 42, nil
	})
	if err != nil {
		t.Fatalf("the widget's status never became doubled=42: %v", err)
	}
	t.Log("envtest: the manager reconciled the widget (status.doubled=42)")
}

// envtest's users (client certificates with groups) are authenticated and RBAC holds them.
func TestProvisionedUsersAreAuthorizedByRBAC(t *testing.T) {
	env, admin := start(t)
	ctx := context.Background()

	user, err := env.AddUser(envtest.User{Name: "alice", Groups: []string{"readers"}}, nil)
	if err != nil {
		t.Fatalf("add user: %v", err)
	}
	alice, err := client.New(user.Config(), client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"a": "1"}}
	if err := admin.Create(ctx, cm); err != nil {
		t.Fatalf("admin create: %v", err)
	}
	var list corev1.ConfigMapList
	err = alice.List(ctx, &list, client.InNamespace("default"))
	if !apierrors.IsForbidden(err) {
		t.Fatalf("alice listed configmaps before any grant: %v", err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		t.Logf("refused as kube refuses: %s", status.Status().Message)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "read-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "readers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "readers"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatalf("admin create %T: %v", o, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return alice.List(ctx, &list, client.InNamespace("default")) == nil, nil
	})
	if err != nil {
		t.Fatalf("alice, a reader, never listed configmaps: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Data["a"] != "1" {
		t.Fatalf("alice's list: %+v", list.Items)
	}
	// Reading is all the group may do.
	if err := alice.Delete(ctx, cm); !apierrors.IsForbidden(err) {
		t.Fatalf("alice deleted a configmap: %v", err)
	}
	// Pods need no ServiceAccount here: envtest turns that admission plugin off.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lonely"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if err := admin.Create(ctx, pod); err != nil {
		t.Fatalf("admin create pod: %v", err)
	}
	if pod.Spec.ServiceAccountName != "" || len(pod.Spec.Volumes) != 0 {
		t.Fatalf("the pod got a service account's defaults with the plugin off: %q %+v", pod.Spec.ServiceAccountName, pod.Spec.Volumes)
	}
}

type reconcileFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return f(ctx, req)
}
