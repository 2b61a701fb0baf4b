// Command go-tally is a small Go operator built on client-go alone, run against Plinth in CI:
// it takes part in leader election through a coordination.k8s.io Lease, and while it leads
// it watches ConfigMaps labelled example.plinth.dev/tally=true through a shared informer and
// server-side applies a summary ConfigMap named "tally" (how many there are, their names,
// who wrote it).
//
// Run two copies with different --identity values: one leads, the other waits; stop the
// leader and the other takes over within the lease duration.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

const (
	selector     = "example.plinth.dev/tally=true"
	summaryName  = "tally"
	fieldManager = "go-tally"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to a kubeconfig")
	namespace := flag.String("namespace", "default", "namespace to watch and write the summary in")
	identity := flag.String("identity", "", "this copy's name in the Lease (default: the host name)")
	lease := flag.String("lease", "go-tally", "the Lease the copies elect a leader through")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "how long a Lease holds without renewal")
	flag.Parse()
	if *identity == "" {
		host, err := os.Hostname()
		if err != nil {
			fail("no --identity and no host name: %v", err)
		}
		*identity = host
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	config.UserAgent = "go-tally/" + *identity
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: *lease, Namespace: *namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		ReleaseOnCancel: true,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *leaseDuration * 2 / 3,
		RetryPeriod:     *leaseDuration / 6,
		Name:            "go-tally",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				say("leading as %s", *identity)
				tally(ctx, client, *namespace, *identity)
			},
			OnStoppedLeading: func() { say("stopped leading") },
			OnNewLeader:      func(leader string) { say("leader is %s", leader) },
		},
	})
}

// tally keeps the summary ConfigMap up to date until ctx ends.
func tally(ctx context.Context, client kubernetes.Interface, namespace, identity string) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	configMaps := factory.Core().V1().ConfigMaps()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := configMaps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { poke(obj) },
		DeleteFunc: poke,
	}); err != nil {
		fail("event handler: %v", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), configMaps.Informer().HasSynced) {
		return
	}
	say("informer synced")
	poke(nil)
	for {
		select {
		case <-ctx.Done():
			factory.Shutdown()
			return
		case <-changed:
		}
		listed, err := configMaps.Lister().ConfigMaps(namespace).List(labels.Everything())
		if err != nil {
			say("list: %v", err)
			continue
		}
		names := make([]string, 0, len(listed))
		for _, cm := range listed {
			names = append(names, cm.Name)
		}
		sort.Strings(names)
		summary := applycorev1.ConfigMap(summaryName, namespace).
			WithLabels(map[string]string{"app.kubernetes.io/managed-by": fieldManager}).
			WithData(map[string]string{
				"count":  strconv.Itoa(len(names)),
				"names":  strings.Join(names, ","),
				"writer": identity,
			})
		applied, err := client.CoreV1().ConfigMaps(namespace).Apply(ctx, summary,
			metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		if err != nil {
			say("apply: %v", err)
			// Try again on the next change, or after a moment.
			time.AfterFunc(time.Second, func() { poke(nil) })
			continue
		}
		say("applied %s/%s count=%s resourceVersion=%s", applied.Namespace, applied.Name,
			applied.Data["count"], applied.ResourceVersion)
	}
}

func say(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-tally: "+format+"\n", args...)
	os.Exit(1)
}
