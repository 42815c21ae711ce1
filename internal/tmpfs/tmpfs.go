// Package tmpfs mounts small tmpfs file systems for specs that need a disk
// that fills up (the capture store's and proxy's full-disk specs).
package tmpfs

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// Mount mounts a tmpfs of sizeBytes on a new directory under parent and
// returns it with a function that unmounts it. It needs root (or
// CAP_SYS_ADMIN); when the mount is refused, err says why, so the caller can
// skip with that reason (or fail where CI=true).
func Mount(parent string, sizeBytes int64) (dir string, unmount func(), err error) {
	dir, err = os.MkdirTemp(parent, "tmpfs-")
	if err != nil {
		return "", nil, err
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(sizeBytes, 10)+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		_ = os.Remove(dir)
		return "", nil, fmt.Errorf("mount -t tmpfs on %s: %v: %s", dir, err, out)
	}
	return dir, func() {
		// A descriptor still open on it makes umount refuse; detach it
		// lazily then, so nothing stays mounted after the spec.
		if exec.Command("umount", dir).Run() != nil {
			_ = exec.Command("umount", "-l", dir).Run()
		}
		_ = os.Remove(dir)
	}, nil
}

// Fill writes a file of zeros into dir until the file system refuses more,
// and returns its path (remove it to free the space).
func Fill(dir string) (string, error) {
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	// Top up the last partial page.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
	return f.Name(), nil
}
