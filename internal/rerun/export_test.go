package rerun

// SelectByFilterSQL is the statement whose plan rerun_test checks.
const SelectByFilterSQL = selectByFilterSQL
