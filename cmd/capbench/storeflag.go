package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/capture/store/natsstore"
)

// captureStore is what the proxy, verdict and explain commands use of a
// store; the file store and the NATS store both are one.
type captureStore interface {
	store.Sink
	store.Source
	store.Reader
	consumer.RolloutLister
}

// addStoreFlag registers --store, the alternative to --capture-dir.
func addStoreFlag(f *pflag.FlagSet, dst *string) {
	f.StringVar(dst, "store", "", "capture store URL instead of --capture-dir: nats://host:4222[,host:4222][?stream=S&bucket=B] (NATS JetStream, see docs/nats-store.md) or file:///abs/dir")
}

// openStore opens the store named by --capture-dir or --store; it returns
// nil when neither is set.
func openStore(ctx context.Context, captureDir, storeURL string, fileOpts ...store.FileOption) (captureStore, error) {
	switch {
	case captureDir != "" && storeURL != "":
		return nil, errors.New("--capture-dir and --store name the same thing; give one of them")
	case captureDir != "":
		fs, err := store.NewFileStore(captureDir, fileOpts...)
		if err != nil {
			return nil, fmt.Errorf("--capture-dir: %w", err)
		}
		return fs, nil
	case storeURL == "":
		return nil, nil
	}
	scheme, _, ok := strings.Cut(storeURL, "://")
	switch {
	case ok && scheme == "nats":
		o, err := natsstore.ParseURL(storeURL)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		s, err := natsstore.Open(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("--store %s: %w", natsstore.Redacted(storeURL), err)
		}
		return s, nil
	case ok && scheme == "file":
		u, err := url.Parse(storeURL)
		if err != nil || u.Path == "" || (u.Host != "" && u.Host != "localhost") {
			return nil, fmt.Errorf("--store %q: want file:///absolute/dir", storeURL)
		}
		fs, err := store.NewFileStore(u.Path, fileOpts...)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		return fs, nil
	case ok:
		return nil, fmt.Errorf("--store %q: unknown scheme %q; want nats://host:port or file:///dir", storeURL, scheme)
	default:
		return nil, fmt.Errorf("--store %q is not a URL; want nats://host:port, or use --capture-dir DIR for a directory", storeURL)
	}
}

// looker is the read-only view verdict and explain judge from.
type looker interface {
	consumer.DirLooker
	Close() error
}

// openLooker opens --capture-dir or --store for read-only inspection: a
// directory is read under shared locks and never created or changed; a NATS
// store is only read (Open creates its stream and bucket when missing).
func openLooker(ctx context.Context, captureDir, storeURL string) (looker, error) {
	if captureDir != "" && storeURL != "" {
		return nil, errors.New("--capture-dir and --store name the same thing; give one of them")
	}
	if captureDir != "" {
		ro, err := store.OpenReadOnly(captureDir)
		if err != nil {
			return nil, fmt.Errorf("--capture-dir: %w", err)
		}
		return ro, nil
	}
	if u, err := url.Parse(storeURL); err == nil && u.Scheme == "file" && u.Path != "" && (u.Host == "" || u.Host == "localhost") {
		ro, err := store.OpenReadOnly(u.Path)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		return ro, nil
	}
	s, err := openStore(ctx, "", storeURL)
	if err != nil {
		return nil, err
	}
	l, ok := s.(looker)
	if !ok {
		s.Close()
		return nil, fmt.Errorf("--store %s cannot be inspected read-only", storeName("", storeURL))
	}
	return l, nil
}

// storeName names the store in messages (a NATS URL without its password).
func storeName(captureDir, storeURL string) string {
	if captureDir != "" {
		return "--capture-dir " + captureDir
	}
	return "--store " + natsstore.Redacted(storeURL)
}
