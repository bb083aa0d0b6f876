package faulttest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
)

// fakeDNS answers A and AAAA queries from a table, over in-memory
// connections: a net.Resolver using it sends no packet anywhere. Names not
// in the table are NXDOMAIN. /etc/hosts still comes first, as with the
// system resolver.
type fakeDNS struct {
	records map[string][]netip.Addr // lower-case name without the final dot
	queries atomic.Int64
}

// resolver returns a Go resolver that asks f and nobody else.
func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go f.serve(server)
		return client, nil
	}}
}

// serve answers DNS-over-TCP framed queries (a net.Pipe is not a
// PacketConn, so the resolver frames them with a length prefix).
func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		f.queries.Add(1)
		resp := f.answer(q)
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// answer builds the response to one query message, or nil when the query
// cannot be parsed.
func (f *fakeDNS) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	// The question: labels up to the root, then type and class.
	var labels []string
	i := 12
	for {
		if i >= len(q) {
			return nil
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i : i+2])
	question := q[12 : i+4]
	name := strings.ToLower(strings.Join(labels, "."))

	addrs, known := f.records[name]
	var answers [][]byte
	for _, a := range addrs {
		switch {
		case qtype == 1 && a.Is4(): // A
			ip := a.As4()
			answers = append(answers, rr(1, ip[:]))
		case qtype == 28 && a.Is6() && !a.Is4In6(): // AAAA
			ip := a.As16()
			answers = append(answers, rr(28, ip[:]))
		}
	}
	flags := uint16(0x8000 | 0x0400 | 0x0080) // response, authoritative, recursion available
	flags |= binary.BigEndian.Uint16(q[2:4]) & 0x0100
	if !known {
		flags |= 3 // NXDOMAIN
	}
	resp := make([]byte, 12, 512)
	copy(resp[0:2], q[0:2])
	binary.BigEndian.PutUint16(resp[2:4], flags)
	binary.BigEndian.PutUint16(resp[4:6], 1)
	binary.BigEndian.PutUint16(resp[6:8], uint16(len(answers)))
	resp = append(resp, question...)
	for _, a := range answers {
		resp = append(resp, a...)
	}
	return resp
}

// rr is a resource record for the question's name (a pointer to offset 12).
func rr(typ uint16, data []byte) []byte {
	b := []byte{0xc0, 12}
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, 1) // IN
	b = binary.BigEndian.AppendUint32(b, 60)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

// countingListener accepts TCP connections on a loopback address and counts
// them: a refused target must never be connected to.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func listenCounting(network, addr string) (*countingListener, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	cl := &countingListener{Listener: l}
	cl.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cl.accepted.Add(1)
			c.Close()
		}
	})
	return cl, nil
}

func (c *countingListener) close() {
	c.Listener.Close()
	c.wg.Wait()
}

func (c *countingListener) port() int { return c.Addr().(*net.TCPAddr).Port }
