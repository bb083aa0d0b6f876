package purchaseorder

// SuppliersSQL is the supplier look-up, for its plan test.
var SuppliersSQL = supplierLookUp.SQL
