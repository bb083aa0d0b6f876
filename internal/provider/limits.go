package provider

// Limited is a provider whose connections have limits (Limits, in
// accounting.go), kept across every container of the fleet: the claim
// leases no more than MaxInFlight of a connection's rows, and internal/pace
// spaces its calls to CallsPerMinute.
type Limited interface {
	Provider
	// Limits returns conn's limits: the provider's defaults, or what conn's
	// config_json sets instead. Given a Connection with no Config, or one
	// whose overrides are not valid (the call itself then fails on them),
	// it returns the defaults.
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

func limitsOf(name string, conn Connection) Limits {
	if len(conn.Config) > 0 {
		if l, err := ConnectionLimits(name, conn.Config); err == nil {
			return l
		}
	}
	l, _ := DefaultLimits(name)
	return l
}
