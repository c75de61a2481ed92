// Command deviceplugin advertises fake GPUs to the real kubelet through its device-plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), so trials that request nvidia.com/gpu on the real
// node go through the kubelet's device manager as on a GPU node. It serves the kubelet's own test
// stub (pkg/kubelet/cm/devicemanager/plugin/v1beta1) with -count healthy devices named gpu-0..,
// and answers Allocate with NVIDIA_VISIBLE_DEVICES set to the allocated ids, as NVIDIA's plugin does,
// and CUDA_VISIBLE_DEVICES to the same, as the process kubelet gives its pods. It registers again
// when the kubelet restarts.
//
// Built by devcluster/nodebuild.py, started by devcluster/realnode.py.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

func allocate(r *pluginapi.AllocateRequest, devs map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	var out pluginapi.AllocateResponse
	for _, req := range r.ContainerRequests {
		for _, id := range req.DevicesIds {
			if _, ok := devs[id]; !ok {
				return nil, fmt.Errorf("no device %s", id)
			}
		}
		ids := strings.Join(req.DevicesIds, ",")
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": ids, "CUDA_VISIBLE_DEVICES": ids},
		})
	}
	return &out, nil
}

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	count := flag.Int("count", 4, "number of devices")
	socketDir := flag.String("socket-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin folder")
	flag.Parse()
	ctx := context.Background()
	logger := klog.FromContext(ctx)
	devs := make([]*pluginapi.Device, *count)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy}
	}
	dir := strings.TrimSuffix(*socketDir, "/") + "/"
	stub := plugin.NewDevicePluginStub(logger, devs, dir+"kubetune-fake-gpu.sock", *resource, false, false)
	stub.SetAllocFunc(allocate)
	if err := stub.Start(ctx); err != nil {
		logger.Error(err, "start")
		os.Exit(1)
	}
	if err := stub.Register(ctx, dir+"kubelet.sock", *resource, dir); err != nil {
		logger.Error(err, "register with the kubelet")
		os.Exit(1)
	}
	logger.Info("registered", "resource", *resource, "devices", *count)
	// a restarted kubelet forgets its plugins: register again when it makes its socket anew
	go stub.Watch(ctx, dir+"kubelet.sock", *resource, dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	_ = stub.Stop(logger)
}
