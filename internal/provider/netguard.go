package provider

import (
	"fmt"
	"net/netip"
	"syscall"
)

// nonPublicAddressError is a connection the webhook refused because its
// resolved address is not public.
type nonPublicAddressError struct {
	Addr string
}

func (e *nonPublicAddressError) Error() string {
	return fmt.Sprintf("refusing to connect to non-public address %s", e.Addr)
}

// refuseNonPublic is a net.Dialer Control func: it runs on the resolved
// "ip:port" of every connection attempt, before connect(2), and fails the
// attempt unless the IP is public.
func refuseNonPublic(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// The dialer always hands us a literal ip:port; anything else is
		// refused rather than guessed about.
		return &nonPublicAddressError{Addr: address}
	}
	if !isPublicAddr(ap.Addr()) {
		return &nonPublicAddressError{Addr: ap.Addr().String()}
	}
	return nil
}

// nonPublicPrefixes are ranges the netip predicates do not cover. Read-only.
var nonPublicPrefixes = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, incl. broadcast
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated) and ::, ::1
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, ORCHID…)
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
}

// IPv6 prefixes that embed an IPv4 address, which must itself be public:
// well-known NAT64 (the last 32 bits) and 6to4 (bits 16 to 48). Read-only.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// isPublicAddr reports whether a is a globally routable unicast address the
// webhook may connect to: not loopback, link-local (169.254.169.254, the
// cloud metadata endpoint, included), private (10/8, 172.16/12, 192.168/16,
// fc00::/7), unspecified, multicast, CGNAT, reserved or documentation, in
// IPv4 or any IPv4-embedding IPv6 form.
func isPublicAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("") // ::ffff:10.0.0.1 is 10.0.0.1; a zone would defeat Prefix.Contains
	switch b := a.As16(); {
	case a.Is6() && nat64.Contains(a):
		a = netip.AddrFrom4([4]byte(b[12:16]))
	case a.Is6() && sixToFour.Contains(a):
		a = netip.AddrFrom4([4]byte(b[2:6]))
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	for _, p := range nonPublicPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
