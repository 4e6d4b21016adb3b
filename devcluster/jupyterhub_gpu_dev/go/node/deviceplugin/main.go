// Command deviceplugin is a small Kubernetes device plugin (kubelet
// device-plugin API v1beta1) for the dev cluster's simulated GPU node.
//
// It advertises --count healthy devices gpu0..gpu{N-1} of --resource to the
// kubelet, and on Allocate bind-mounts read-only the stand-in device files and
// nvidia-smi script prepared under --device-root:
//
//	<device-root>/dev/nvidiactl   -> /dev/nvidiactl
//	<device-root>/dev/nvidiaK     -> /dev/nvidiaK      (one per device gpuK)
//	<device-root>/bin/nvidia-smi  -> /usr/local/bin/nvidia-smi
//
// and sets NVIDIA_VISIBLE_DEVICES to the allocated indices.
//
// It registers through the kubelet's plugin watcher: one socket in
// --registry-dir (the kubelet's <root-dir>/plugins_registry) serves the
// plugin-registration service (GetInfo: a DevicePlugin) and the device plugin
// itself; the kubelet finds it there, also after a restart, and the socket is
// served again should it vanish (polled once a second). Not the legacy
// kubelet.sock: the dev cluster runs two kubelets on one machine, and that
// socket's path is fixed in the kubelet (/var/lib/kubelet/device-plugins), so
// both would claim it; plugins_registry is per --root-dir. It exits 0 on
// SIGINT or SIGTERM, removing its socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration answers the kubelet's plugin watcher for a socket in plugins_registry.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	resource, endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: r.resource, Endpoint: r.endpoint,
		SupportedVersions: []string{pluginapi.Version}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		log.Printf("registered %s with the kubelet's plugin watcher (%s)", r.resource, r.endpoint)
	} else {
		log.Printf("the kubelet refused %s: %s", r.resource, st.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource   string
	count      int
	deviceRoot string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devs := make([]*pluginapi.Device, p.count)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("gpu%d", i), Health: pluginapi.Healthy}
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.GetContainerRequests() {
		var idx []int
		for _, id := range creq.GetDevicesIds() {
			k, err := strconv.Atoi(strings.TrimPrefix(id, "gpu"))
			if !strings.HasPrefix(id, "gpu") || err != nil || k < 0 || k >= p.count {
				return nil, status.Errorf(codes.InvalidArgument, "unknown device %q", id)
			}
			idx = append(idx, k)
		}
		sort.Ints(idx)
		mounts := []*pluginapi.Mount{{
			ContainerPath: "/dev/nvidiactl",
			HostPath:      filepath.Join(p.deviceRoot, "dev", "nvidiactl"),
			ReadOnly:      true,
		}}
		vis := make([]string, len(idx))
		for i, k := range idx {
			mounts = append(mounts, &pluginapi.Mount{
				ContainerPath: fmt.Sprintf("/dev/nvidia%d", k),
				HostPath:      filepath.Join(p.deviceRoot, "dev", fmt.Sprintf("nvidia%d", k)),
				ReadOnly:      true,
			})
			vis[i] = strconv.Itoa(k)
		}
		mounts = append(mounts, &pluginapi.Mount{
			ContainerPath: "/usr/local/bin/nvidia-smi",
			HostPath:      filepath.Join(p.deviceRoot, "bin", "nvidia-smi"),
			ReadOnly:      true,
		})
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:   map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(vis, ",")},
			Mounts: mounts,
		})
		log.Printf("allocate %s: devices %v -> NVIDIA_VISIBLE_DEVICES=%s", p.resource, creq.GetDevicesIds(), strings.Join(vis, ","))
	}
	return resp, nil
}

// fileID identifies one incarnation of a file: inode numbers alone are reused
// when a socket is removed and recreated at once, so the change time is kept too.
type fileID struct {
	ino  uint64
	ctim syscall.Timespec
}

// identity returns path's fileID, or the zero fileID when it does not exist.
func identity(path string) fileID {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}
	}
	return fileID{st.Ino, st.Ctim}
}

// serve listens on sock and serves p there; the returned server is running.
func serve(p *plugin, sock string, reg *registration) (*grpc.Server, error) {
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	if reg != nil {
		registerapi.RegisterRegistrationServer(srv, reg)
	}
	go func() {
		if err := srv.Serve(lis); err != nil {
			log.Printf("serve %s: %v", sock, err)
		}
	}()
	return srv, nil
}

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	count := flag.Int("count", 1, "number of devices to advertise")
	registryDir := flag.String("registry-dir", "", "the kubelet's plugins_registry directory (under its --root-dir)")
	deviceRoot := flag.String("device-root", "", "host folder with dev/nvidiactl, dev/nvidia0..N-1 and bin/nvidia-smi")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("deviceplugin: ")
	if *count < 0 || *deviceRoot == "" || *resource == "" || *registryDir == "" {
		log.Fatal("need --resource, --count >= 0, --registry-dir and --device-root")
	}
	root, err := filepath.Abs(*deviceRoot)
	if err != nil {
		log.Fatal(err)
	}
	p := &plugin{resource: *resource, count: *count, deviceRoot: root}
	serveRegistry(p, *registryDir, "gpuhub-"+regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(*resource, "-")+".sock")
}

// serveRegistry serves the plugin on one socket in the kubelet's plugins_registry, re-serving it should it vanish.
func serveRegistry(p *plugin, dir, name string) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		log.Fatal(err)
	}
	sock := filepath.Join(dir, name)
	reg := &registration{resource: p.resource, endpoint: sock}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var srv *grpc.Server
	for {
		if srv != nil && identity(sock) == (fileID{}) {
			log.Printf("socket %s gone; re-serving", sock)
			srv.Stop()
			srv = nil
		}
		if srv == nil {
			if srv, err = serve(p, sock, reg); err != nil {
				log.Printf("listen %s: %v", sock, err)
				srv = nil
			} else {
				log.Printf("serving %s (%d devices) at %s for the kubelet's plugin watcher", p.resource, p.count, sock)
			}
		}
		select {
		case s := <-sigs:
			log.Printf("%v: stopping", s)
			if srv != nil {
				srv.Stop()
			}
			os.Remove(sock)
			os.Exit(0)
		case <-tick.C:
		}
	}
}
