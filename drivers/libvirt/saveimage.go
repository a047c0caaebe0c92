package libvirt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// libvirt's QEMU save image (src/qemu/qemu_saveimage.h, format version 2): a 92-byte header
// (magic, then 19 native-endian uint32: version, data_len, was_running, compressed,
// cookieOffset, 14 unused), data_len bytes holding the domain XML and the cookie (each
// NUL-terminated, then zeros: libvirt leaves 64 KiB of room so the XML can be edited in place),
// then QEMU's migration stream to the end of the file.
//
// The driver rewrites the XML of a node's snapshot in place before each restore, because a
// restore keeps the saved domain's name and UUID (libvirt refuses a different one through the
// API's dxml: "Target domain uuid ... does not match source") while every generation is a new
// domain. Only the stream is digest-checked; the XML is regenerated from the manifest each time.
const (
	saveMagic      = "LibvirtQemudSave"
	saveVersion    = 2
	saveHeaderSize = 16 + 19*4
)

// saveHeader is the part of the header a rewrite keeps.
type saveHeader struct {
	DataLen    uint32 `json:"data_len"`
	WasRunning uint32 `json:"was_running"`
}

// streamOffset is where QEMU's migration stream starts.
func (h saveHeader) streamOffset() int64 { return saveHeaderSize + int64(h.DataLen) }

var errSaveImage = errors.New("not a libvirt QEMU save image this driver can rewrite")

// readSaveImage reads path's header, domain XML and cookie. Only uncompressed version-2 images
// are accepted.
func readSaveImage(path string) (saveHeader, string, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return saveHeader{}, "", "", err
	}
	defer f.Close()
	hdr := make([]byte, saveHeaderSize)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: header: %w", path, err)
	}
	if string(hdr[:16]) != saveMagic {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: magic %q: %w", path, hdr[:16], errSaveImage)
	}
	u := func(i int) uint32 { return binary.LittleEndian.Uint32(hdr[16+4*i:]) }
	if v := u(0); v != saveVersion {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: version %d, want %d: %w", path, v, saveVersion, errSaveImage)
	}
	h := saveHeader{DataLen: u(1), WasRunning: u(2)}
	if c := u(3); c != 0 {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: compressed (format %d): %w", path, c, errSaveImage)
	}
	cookieOff := u(4)
	if h.DataLen > 16<<20 || cookieOff > h.DataLen {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: data length %d, cookie at %d: %w", path, h.DataLen, cookieOff, errSaveImage)
	}
	data := make([]byte, h.DataLen)
	if _, err := io.ReadFull(f, data); err != nil {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: domain XML: %w", path, err)
	}
	cstr := func(b []byte) string {
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return string(b[:i])
		}
		return string(b)
	}
	xmlDoc, cookie := cstr(data), ""
	if cookieOff > 0 {
		cookie = cstr(data[cookieOff:])
	}
	if xmlDoc == "" {
		return saveHeader{}, "", "", fmt.Errorf("save image %s: no domain XML: %w", path, errSaveImage)
	}
	return h, xmlDoc, cookie, nil
}

// encodeSaveHeader renders header, XML and cookie into exactly streamOffset() bytes; it fails
// when they do not fit the room libvirt left.
func encodeSaveHeader(h saveHeader, xmlDoc, cookie string) ([]byte, error) {
	need := len(xmlDoc) + 1
	if cookie != "" {
		need += len(cookie) + 1
	}
	if need > int(h.DataLen) {
		return nil, fmt.Errorf("domain XML and cookie need %d bytes, the image has room for %d: %w", need, h.DataLen, errSaveImage)
	}
	b := make([]byte, h.streamOffset())
	copy(b, saveMagic)
	put := func(i int, v uint32) { binary.LittleEndian.PutUint32(b[16+4*i:], v) }
	put(0, saveVersion)
	put(1, h.DataLen)
	put(2, h.WasRunning)
	put(3, 0)
	if cookie != "" {
		put(4, uint32(len(xmlDoc)+1))
	}
	copy(b[saveHeaderSize:], xmlDoc)
	if cookie != "" {
		copy(b[saveHeaderSize+len(xmlDoc)+1:], cookie)
	}
	return b, nil
}

// rewriteSaveImage replaces path's header and XML in place; the stream is untouched.
func rewriteSaveImage(path string, h saveHeader, xmlDoc, cookie string) error {
	b, err := encodeSaveHeader(h, xmlDoc, cookie)
	if err != nil {
		return fmt.Errorf("save image %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return fmt.Errorf("save image %s: rewrite header: %w", path, err)
	}
	return f.Close()
}

// streamSHA256 hashes path from off to its end, returning the hex digest and the length.
func streamSHA256(path string, off int64) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", 0, err
	}
	hs := sha256.New()
	n, err := io.Copy(hs, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(hs.Sum(nil)), n, nil
}
