package dockerapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Label marks every image, network and container this package creates, so
// the leftovers of an aborted run can be found:
// `docker rm -f $(docker ps -aq --filter label=org.capbench)`.
const Label = "org.capbench"

// ContainerSpec describes a container to run.
type ContainerSpec struct {
	Image string
	// Cmd replaces the image's CMD (the arguments of its ENTRYPOINT).
	Cmd []string
	// Port, e.g. "8000/tcp", is published on 127.0.0.1 at a free host port.
	Port string
	// Binds are "host-path:container-path[:ro]" mounts.
	Binds []string
	// Network is a network to join (name or ID), with Aliases as the
	// container's names on it; empty keeps the default bridge.
	Network string
	Aliases []string
	// GPUs asks for every NVIDIA GPU (like `docker run --gpus all`).
	GPUs bool
	// IpcMode is the IPC namespace, e.g. "host" (vLLM wants a large /dev/shm).
	IpcMode string
}

// Container is a container this client created.
type Container struct {
	c     *Client
	ID    string
	Image string
	port  string
}

// ShortID is the ID as `docker ps` shows it.
func (ctr *Container) ShortID() string {
	if len(ctr.ID) > 12 {
		return ctr.ID[:12]
	}
	return ctr.ID
}

func (ctr *Container) String() string { return ctr.ShortID() + " (" + ctr.Image + ")" }

type portBinding struct {
	HostIP   string `json:"HostIp"`
	HostPort string `json:"HostPort"`
}

type deviceRequest struct {
	Driver       string     `json:"Driver"`
	Count        int        `json:"Count"`
	Capabilities [][]string `json:"Capabilities"`
}

type hostConfig struct {
	PortBindings   map[string][]portBinding `json:"PortBindings,omitempty"`
	Binds          []string                 `json:"Binds,omitempty"`
	NetworkMode    string                   `json:"NetworkMode,omitempty"`
	IpcMode        string                   `json:"IpcMode,omitempty"`
	DeviceRequests []deviceRequest          `json:"DeviceRequests,omitempty"`
}

type endpointConfig struct {
	Aliases []string `json:"Aliases,omitempty"`
}

type createBody struct {
	Image            string              `json:"Image"`
	Cmd              []string            `json:"Cmd,omitempty"`
	ExposedPorts     map[string]struct{} `json:"ExposedPorts,omitempty"`
	Labels           map[string]string   `json:"Labels"`
	HostConfig       hostConfig          `json:"HostConfig"`
	NetworkingConfig *struct {
		EndpointsConfig map[string]endpointConfig `json:"EndpointsConfig"`
	} `json:"NetworkingConfig,omitempty"`
}

func (c *Client) createBody(spec ContainerSpec) createBody {
	b := createBody{Image: spec.Image, Cmd: spec.Cmd, Labels: map[string]string{Label: "true"},
		HostConfig: hostConfig{Binds: spec.Binds, IpcMode: spec.IpcMode}}
	if spec.Port != "" {
		b.ExposedPorts = map[string]struct{}{spec.Port: {}}
		// An empty HostPort lets the engine pick a free one.
		b.HostConfig.PortBindings = map[string][]portBinding{spec.Port: {{HostIP: c.PublishIP()}}}
	}
	if spec.GPUs {
		b.HostConfig.DeviceRequests = []deviceRequest{{Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}}}
	}
	if spec.Network != "" {
		// As `docker run --network N --network-alias A` sends it.
		b.HostConfig.NetworkMode = spec.Network
		b.NetworkingConfig = &struct {
			EndpointsConfig map[string]endpointConfig `json:"EndpointsConfig"`
		}{map[string]endpointConfig{spec.Network: {Aliases: spec.Aliases}}}
	}
	return b
}

// Run creates and starts a container. On error nothing is left behind.
func (c *Client) Run(ctx context.Context, spec ContainerSpec) (*Container, error) {
	if spec.Image == "" {
		return nil, errors.New("docker: run container: no image given")
	}
	var created struct {
		ID string `json:"Id"`
	}
	if err := c.call(ctx, "create container from "+spec.Image, http.MethodPost, "/containers/create", nil, c.createBody(spec), &created); err != nil {
		return nil, err
	}
	ctr := &Container{c: c, ID: created.ID, Image: spec.Image, port: spec.Port}
	if err := c.call(ctx, "start container "+ctr.String(), http.MethodPost, "/containers/"+ctr.ID+"/start", nil, nil, nil); err != nil {
		return nil, errors.Join(err, ctr.Remove(context.WithoutCancel(ctx)))
	}
	return ctr, nil
}

// containerState is the part of GET /containers/{id}/json capbench reads.
type containerState struct {
	State struct {
		Status    string
		Running   bool
		ExitCode  int
		OOMKilled bool
		Error     string
	}
	NetworkSettings struct {
		Ports map[string][]portBinding
	}
}

func (ctr *Container) inspect(ctx context.Context) (containerState, error) {
	var st containerState
	err := ctr.c.call(ctx, "inspect container "+ctr.String(), http.MethodGet, "/containers/"+ctr.ID+"/json", nil, nil, &st)
	return st, err
}

// hostAddr is the host:port the container's published port is reached at.
// ok is false while the engine has not reported the port's bindings yet.
func (ctr *Container) hostAddr(st containerState) (addr string, ok bool, err error) {
	bindings, known := st.NetworkSettings.Ports[ctr.port]
	if !known {
		return "", false, nil
	}
	for _, b := range bindings {
		if b.HostPort != "" {
			return ctr.c.PublishIP() + ":" + b.HostPort, true, nil
		}
	}
	return "", false, fmt.Errorf("docker: container %s does not publish port %s on the host (its bindings: %v); "+
		"it must be created with that port published", ctr, ctr.port, bindings)
}

// Remove stops the container (SIGTERM, then SIGKILL after 10 s) and removes
// it with its anonymous volumes. A container already gone is not an error.
func (ctr *Container) Remove(ctx context.Context) error {
	err := ctr.c.call(ctx, "stop container "+ctr.String(), http.MethodPost, "/containers/"+ctr.ID+"/stop", url.Values{"t": {"10"}}, nil, nil)
	var api *APIError
	if err != nil && !(errors.As(err, &api) && (api.Status == http.StatusNotModified || api.Status == http.StatusNotFound)) {
		return err
	}
	err = ctr.c.call(ctx, "remove container "+ctr.String(), http.MethodDelete, "/containers/"+ctr.ID, url.Values{"force": {"1"}, "v": {"1"}}, nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Network is a network this client created.
type Network struct {
	c    *Client
	ID   string
	Name string
}

// CreateNetwork creates a private bridge network with a fresh name; its
// containers reach each other by their aliases.
func (c *Client) CreateNetwork(ctx context.Context) (*Network, error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "capbench-" + hex.EncodeToString(rnd[:])
	body := map[string]any{"Name": name, "Driver": "bridge", "CheckDuplicate": true, "Labels": map[string]string{Label: "true"}}
	var created struct {
		ID string `json:"Id"`
	}
	if err := c.call(ctx, "create network "+name, http.MethodPost, "/networks/create", nil, body, &created); err != nil {
		return nil, err
	}
	return &Network{c: c, ID: created.ID, Name: name}, nil
}

// Remove deletes the network (its containers must be gone). A network
// already gone is not an error.
func (n *Network) Remove(ctx context.Context) error {
	err := n.c.call(ctx, "remove network "+n.Name, http.MethodDelete, "/networks/"+n.ID, nil, nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// joinLines is for messages: one indented block.
func joinLines(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "  (no output)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
