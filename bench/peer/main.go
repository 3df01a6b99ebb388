// peer lists and watches Pods through a controller-runtime informer cache, as the Dynamo operator's Pod
// cache does, for bench/scale.py: the figure crashwatch's are compared with.
//
// The cache keeps only what the crash-loop rule reads (a cache.TransformFunc: labels, namespace, name,
// uid, owner references, phase, the Ready condition, each container status's name, restartCount, state
// and lastState). It prints one JSON object a line on stdout: "synced" once WaitForCacheSync returns,
// then a "sample" every --interval with the events handled so far, CPU seconds (getrusage) and resident
// memory (VmRSS, VmHWM from /proc/self/status). It runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "", "namespace to watch (default: all)")
	interval := flag.Duration("interval", time.Second, "time between samples")
	contentType := flag.String("content-type", "",
		"json or protobuf; default: controller-runtime's own choice (protobuf for built-in types, JSON when the server answers JSON)")
	qps := flag.Float64("qps", 1000, "client-side rate limit (requests/s)")
	flag.Parse()

	start := time.Now()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	config.QPS = float32(*qps)
	config.Burst = int(*qps)
	switch *contentType {
	case "json":
		config.ContentType = "application/json"
	case "protobuf":
		config.ContentType = "application/vnd.kubernetes.protobuf"
	case "":
	default:
		fail(fmt.Errorf("--content-type: json or protobuf, not %q", *contentType))
	}
	// Pods only, so a fixed REST mapping: no discovery requests before the list
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("PodList"), meta.RESTScopeNamespace)
	options := cache.Options{
		Mapper:   mapper,
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: transform}},
	}
	if *namespace != "" {
		options.DefaultNamespaces = map[string]cache.Config{*namespace: {}}
	}
	podCache, err := cache.New(config, options)
	if err != nil {
		fail(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	informer, err := podCache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		fail(err)
	}
	var events atomic.Int64
	count := func() { events.Add(1) }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { count() },
		UpdateFunc: func(any, any) { count() },
		DeleteFunc: func(any) { count() },
	}); err != nil {
		fail(err)
	}
	go func() {
		if err := podCache.Start(ctx); err != nil {
			fail(err)
		}
	}()
	if !podCache.WaitForCacheSync(ctx) {
		fail(fmt.Errorf("the cache did not sync"))
	}
	synced := time.Since(start).Seconds()
	var pods corev1.PodList
	if err := podCache.List(ctx, &pods); err != nil {
		fail(err)
	}
	emit(map[string]any{"kind": "synced", "seconds": synced, "pods": len(pods.Items), "events": events.Load()})
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			emit(map[string]any{"kind": "sample", "seconds": time.Since(start).Seconds(), "events": events.Load()})
		}
	}
}

// transform keeps what the crash-loop rule reads and drops the rest (spec, managed fields,
// annotations, messages), as the operator's Pod cache does.
func transform(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	kept := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            pod.Labels,
			OwnerReferences:   pod.OwnerReferences,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			kept.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	keep := func(statuses []corev1.ContainerStatus) []corev1.ContainerStatus {
		if len(statuses) == 0 {
			return nil
		}
		out := make([]corev1.ContainerStatus, len(statuses))
		for i, s := range statuses {
			out[i] = corev1.ContainerStatus{
				Name: s.Name, RestartCount: s.RestartCount, Ready: s.Ready,
				State: trim(s.State), LastTerminationState: trim(s.LastTerminationState),
			}
		}
		return out
	}
	kept.Status.InitContainerStatuses = keep(pod.Status.InitContainerStatuses)
	kept.Status.ContainerStatuses = keep(pod.Status.ContainerStatuses)
	return kept, nil
}

func trim(state corev1.ContainerState) corev1.ContainerState {
	out := corev1.ContainerState{}
	if state.Running != nil {
		out.Running = &corev1.ContainerStateRunning{}
	}
	if state.Waiting != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: state.Waiting.Reason}
	}
	if state.Terminated != nil {
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: state.Terminated.ExitCode, Reason: state.Terminated.Reason,
		}
	}
	return out
}

func emit(record map[string]any) {
	var usage syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
	record["cpu"] = float64(usage.Utime.Sec+usage.Stime.Sec) + float64(usage.Utime.Usec+usage.Stime.Usec)/1e6
	rss, hwm := memory()
	record["rss"], record["hwm"] = rss, hwm
	line, _ := json.Marshal(record)
	fmt.Println(string(line))
}

// memory reads VmRSS and VmHWM (bytes) from /proc/self/status.
func memory() (int64, int64) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	var rss, hwm int64
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb * 1024
		case "VmHWM:":
			hwm = kb * 1024
		}
	}
	return rss, hwm
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "peer: %v\n", err)
	os.Exit(1)
}
