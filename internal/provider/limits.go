package provider

// Limits are what a provider allows each connection, across every container
// of the fleet: at most MaxInFlight calls at once (the claim leases no more
// of its rows) and CallsPerMinute calls in any minute (internal/pace spaces
// them). Zero: no limit.
type Limits struct {
	MaxInFlight    int
	CallsPerMinute int
}

// Limited is a provider whose connections have limits.
type Limited interface {
	Provider
	// Limits returns conn's limits: the provider's defaults, or what conn's
	// config_json sets instead. Given a Connection with no Config, it
	// returns the defaults.
	Limits(conn Connection) Limits
}

// MaxInFlightDefaults returns, per provider name, the default in-flight
// limit of each registered provider that has one: what the claim applies
// to a connection whose config_json sets none.
func (r Registry) MaxInFlightDefaults() map[string]int {
	out := map[string]int{}
	for name, p := range r {
		if l, ok := p.(Limited); ok {
			if n := l.Limits(Connection{Provider: name}).MaxInFlight; n > 0 {
				out[name] = n
			}
		}
	}
	return out
}
