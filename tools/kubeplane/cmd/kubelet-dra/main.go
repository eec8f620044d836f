// Command kubelet-dra is the DRA side of a kubelet, for the test suite, built from
// the kubelet's own packages: its plugin manager watches a registration
// directory (pkg/kubelet/pluginmanager), its DRA manager (pkg/kubelet/cm/dra)
// registers DRA drivers, wipes the node's ResourceSlices when it starts and
// prepares and unprepares the ResourceClaims of the pods bound to the node,
// read from the API server. A pod whose claims fail to prepare is tried again
// after the kubelet's pod-worker backoff (10 s, jitter 0.5), as a kubelet would.
//
// It runs no containers. It prints one JSON line on stdout once it runs
// ({"event":"started"}) and each time a pod's claims are prepared:
// {"event":"prepared","namespace","pod","uid","cdiDevices":{container: [ids]}};
// "unprepared", "prepareFailed" and "unprepareFailed" lines likewise; each
// line has its "time" (RFC 3339, UTC).
//
// --reboot, before anything starts, clears each --tmpfs directory (what a
// reboot loses: /var/run/cdi and the like) and writes a new boot id into
// --boot-id-file, so a driver under test sees a machine that rebooted.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/util/queue"
	"k8s.io/utils/clock"
)

// The kubelet's pod worker: a failed sync is tried again after backOffPeriod
// (pkg/kubelet/kubelet.go) with workerBackOffPeriodJitterFactor (pod_workers.go).
const (
	backOffPeriod                   = 10 * time.Second
	workerBackOffPeriodJitterFactor = 0.5
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", "", "kubeconfig of the API server")
		nodeName   = flag.String("node-name", "", "the Node this kubelet is")
		rootDir    = flag.String("root-dir", "", "the kubelet directory: plugins_registry/ is watched, the DRA checkpoint lives in it")
		reboot     = flag.Bool("reboot", false, "clear the --tmpfs directories and write a new boot id before starting")
		bootIDFile = flag.String("boot-id-file", "", "file holding the boot id (--reboot writes a new one)")
		tmpfs      stringList
	)
	flag.Var(&tmpfs, "tmpfs", "a directory a reboot empties (repeatable)")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *nodeName == "" || *rootDir == "" {
		fmt.Fprintln(os.Stderr, "kubelet-dra: --kubeconfig, --node-name and --root-dir are required")
		os.Exit(2)
	}
	if *reboot {
		if err := simulateReboot(tmpfs, *bootIDFile); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-dra: reboot: %v\n", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *nodeName, *rootDir); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: %v\n", err)
		os.Exit(1)
	}
}

func simulateReboot(dirs []string, bootIDFile string) error {
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, entry := range entries {
			if err := os.RemoveAll(filepath.Join(dir, entry.Name())); err != nil {
				return err
			}
		}
	}
	if bootIDFile == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(bootIDFile), 0o755); err != nil {
		return err
	}
	return os.WriteFile(bootIDFile, []byte(uuid.NewString()+"\n"), 0o644)
}

func run(ctx context.Context, kubeconfig, nodeName, rootDir string) error {
	logger := klog.FromContext(ctx)
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	registry := filepath.Join(rootDir, "plugins_registry")
	if err := os.MkdirAll(registry, 0o750); err != nil {
		return err
	}

	// The pods bound to this node, as the kubelet's apiserver source lists them.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	pods := factory.Core().V1().Pods()
	informer := pods.Informer()
	sourcesReady := kubeletconfig.NewSourcesReady(func(sets.Set[string]) bool { return informer.HasSynced() })
	activePods := func() []*v1.Pod {
		all, _ := pods.Lister().List(labels.Everything())
		var active []*v1.Pod
		for _, pod := range all {
			if !finished(pod) {
				active = append(active, pod)
			}
		}
		return active
	}
	getNode := func() (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	}

	manager, err := dra.NewManager(logger, client, rootDir)
	if err != nil {
		return err
	}
	// Start wipes the node's ResourceSlices (all drivers) in the background.
	if err := manager.Start(ctx, activePods, getNode, sourcesReady); err != nil {
		return err
	}
	plugins := pluginmanager.NewPluginManager(registry, record.NewFakeRecorder(100))
	plugins.AddHandler(pluginwatcherapi.DRAPlugin, manager.GetWatcherHandler())
	go plugins.Run(sourcesReady, ctx.Done())

	w := &worker{manager: manager, queue: queue.NewBasicWorkQueue(clock.RealClock{}), pods: map[types.UID]*v1.Pod{}, busy: map[types.UID]bool{}}
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.update(obj.(*v1.Pod)) },
		UpdateFunc: func(_, obj any) { w.update(obj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				w.deleted(pod)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	emit(map[string]any{"event": "started", "node": nodeName})
	wait.UntilWithContext(ctx, w.syncDue, 100*time.Millisecond)
	factory.Shutdown()
	return nil
}

func finished(pod *v1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// worker is a pod worker reduced to claims: the newest view of each pod,
// synced when due; a failed sync is due again after the kubelet's backoff.
type worker struct {
	manager *dra.Manager
	queue   queue.WorkQueue
	mu      sync.Mutex
	pods    map[types.UID]*v1.Pod
	gone    map[types.UID]bool
	busy    map[types.UID]bool   // a sync of the pod is running
	done    map[types.UID]string // what the last successful sync did
}

func (w *worker) update(pod *v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[pod.UID] = pod
	w.queue.Enqueue(pod.UID, 0)
}

func (w *worker) deleted(pod *v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[pod.UID] = pod
	if w.gone == nil {
		w.gone = map[types.UID]bool{}
	}
	w.gone[pod.UID] = true
	w.queue.Enqueue(pod.UID, 0)
}

// syncDue starts a sync of each pod that is due, one at a time per pod and
// pods side by side, as the kubelet's pod workers do.
func (w *worker) syncDue(ctx context.Context) {
	for _, uid := range w.queue.GetWork() {
		w.mu.Lock()
		pod, gone, busy := w.pods[uid], w.gone[uid], w.busy[uid]
		if busy {
			w.queue.Enqueue(uid, 100*time.Millisecond)
		} else if pod != nil {
			w.busy[uid] = true
		}
		w.mu.Unlock()
		if busy || pod == nil {
			continue
		}
		go func() {
			defer func() {
				w.mu.Lock()
				delete(w.busy, uid)
				w.mu.Unlock()
			}()
			if len(pod.Spec.ResourceClaims) == 0 {
				return
			}
			var err error
			if gone || finished(pod) {
				err = w.unprepare(ctx, pod, gone)
			} else {
				err = w.prepare(ctx, pod)
			}
			if err != nil {
				w.queue.Enqueue(uid, wait.Jitter(backOffPeriod, workerBackOffPeriodJitterFactor))
			}
		}()
	}
}

func (w *worker) prepare(ctx context.Context, pod *v1.Pod) error {
	if err := w.manager.PrepareResources(ctx, pod); err != nil {
		emit(map[string]any{"event": "prepareFailed", "namespace": pod.Namespace, "pod": pod.Name, "uid": pod.UID, "error": err.Error()})
		return err
	}
	devices := map[string][]string{}
	for i := range pod.Spec.Containers {
		container := &pod.Spec.Containers[i]
		info, err := w.manager.GetResources(pod, container)
		if err != nil {
			return err
		}
		ids := []string{}
		for _, device := range info.CDIDevices {
			ids = append(ids, device.Name)
		}
		devices[container.Name] = ids
	}
	if w.remember(pod.UID, "prepared") {
		emit(map[string]any{"event": "prepared", "namespace": pod.Namespace, "pod": pod.Name, "uid": pod.UID, "cdiDevices": devices})
	}
	return nil
}

func (w *worker) unprepare(ctx context.Context, pod *v1.Pod, gone bool) error {
	if err := w.manager.UnprepareResources(ctx, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		emit(map[string]any{"event": "unprepareFailed", "namespace": pod.Namespace, "pod": pod.Name, "uid": pod.UID, "error": err.Error()})
		return err
	}
	if w.remember(pod.UID, "unprepared") {
		emit(map[string]any{"event": "unprepared", "namespace": pod.Namespace, "pod": pod.Name, "uid": pod.UID})
	}
	if gone {
		w.mu.Lock()
		delete(w.pods, pod.UID)
		delete(w.gone, pod.UID)
		delete(w.done, pod.UID)
		w.mu.Unlock()
	}
	return nil
}

// remember records what a sync did; true when that is news.
func (w *worker) remember(uid types.UID, what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done == nil {
		w.done = map[types.UID]string{}
	}
	news := w.done[uid] != what
	w.done[uid] = what
	return news
}

var emitMu sync.Mutex

func emit(line map[string]any) {
	line["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	data, _ := json.Marshal(line)
	emitMu.Lock()
	defer emitMu.Unlock()
	fmt.Println(string(data))
}
