package provider

import (
	"errors"
	"net/netip"
	"testing"
)

func TestIsPublicAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want bool
	}{
		// Public.
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"93.184.216.34", true},
		{"172.15.255.255", true},
		{"172.32.0.1", true},
		{"100.63.255.255", true},
		{"100.128.0.1", true},
		{"2606:4700:4700::1111", true},
		{"2001:4860:4860::8888", true},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::808:808", true}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", true},  // 6to4 of 8.8.8.8

		// Loopback.
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"::1", false},
		{"::ffff:127.0.0.1", false},
		// Unspecified and "this network".
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"::", false},
		// Link-local, cloud metadata included.
		{"169.254.169.254", false},
		{"169.254.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		// Private.
		{"10.0.0.1", false},
		{"10.255.255.255", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:192.168.0.1", false},
		// Unique-local and site-local.
		{"fc00::1", false},
		{"fd12:3456:789a::1", false},
		{"fec0::1", false},
		// Carrier-grade NAT.
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"::ffff:100.64.0.1", false},
		// Multicast and broadcast.
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"255.255.255.255", false},
		{"ff02::1", false},
		{"ff0e::1", false},
		// Reserved, documentation, benchmarking.
		{"240.0.0.1", false},
		{"192.0.0.1", false},
		{"192.0.2.1", false},
		{"198.18.0.1", false},
		{"198.51.100.1", false},
		{"203.0.113.1", false},
		{"2001:db8::1", false},
		// IPv4 embedded in IPv6.
		{"::127.0.0.1", false},      // IPv4-compatible
		{"64:ff9b::a00:1", false},   // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", false},  // NAT64 of 127.0.0.1
		{"64:ff9b:1::a00:1", false}, // local-use NAT64
		{"2002:a00:1::1", false},    // 6to4 of 10.0.0.1
		{"2002:a9fe:a9fe::", false}, // 6to4 of 169.254.169.254
	}
	for _, tt := range tests {
		if got := isPublicAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("isPublicAddr(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if isPublicAddr(netip.Addr{}) {
		t.Error("isPublicAddr(zero Addr) = true, want false")
	}
}

func TestRefuseNonPublic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		address string
		refused bool
	}{
		{"8.8.8.8:443", false},
		{"[2606:4700:4700::1111]:443", false},
		{"127.0.0.1:443", true},
		{"[::1]:443", true},
		{"169.254.169.254:80", true},
		{"[::ffff:10.0.0.1]:443", true},
		{"not-an-address", true},
		{"example.com:443", true}, // the dialer never passes names; refuse rather than guess
	}
	for _, tt := range tests {
		err := refuseNonPublic("tcp", tt.address, nil)
		var refusal *nonPublicAddressError
		if got := errors.As(err, &refusal); got != tt.refused {
			t.Errorf("refuseNonPublic(%s) = %v, want refused=%v", tt.address, err, tt.refused)
		}
	}
}
