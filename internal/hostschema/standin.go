package hostschema

import (
	"fmt"
	"strings"
)

// StandInSQL creates, as one DO block, each declared table the search_path
// finds in no schema (to_regclass looks in every schema of it, as the
// host's own queries do, where "create table if not exists" looks only in
// the first), with the host's and the optional columns of the declaration
// and nothing more: the demo, the tests and the benchmarks run on the
// minimum the contract promises. A host that already created a table, in
// any schema of the search_path, keeps it exactly as it is. Nothing ever
// reverts it: these tables and their rows belong to the host, and no down
// step drops them.
func StandInSQL() string {
	var b strings.Builder
	b.WriteString("do $$\nbegin\n")
	for _, t := range Tables {
		fmt.Fprintf(&b, "    if to_regclass('%s') is null then\n        create table %s (\n", t.Name, t.Name)
		var cols []string
		for _, c := range t.Columns {
			if c.Owner == Ours {
				continue
			}
			cols = append(cols, fmt.Sprintf("            %s %s", c.Name, c.StandIn))
		}
		b.WriteString(strings.Join(cols, ",\n"))
		b.WriteString("\n        );\n")
		// The lines of an order are read by their order: the index comes
		// with the stand-in's table, a host's own table gets nothing.
		if t.Name == PurchaseOrderLines {
			fmt.Fprintf(&b, "        create index %[1]s_purchase_order_id_idx on %[1]s (purchase_order_id, created_at);\n", t.Name)
		}
		b.WriteString("    end if;\n")
	}
	b.WriteString("end\n$$")
	return b.String()
}
