package bench

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// cpuClock is the machine's CPU time so far, all of it and the part its
// host gave to other guests (steal, /proc/stat); ok is false where the
// system does not say.
type cpuClock struct {
	steal, total float64
	ok           bool
}

// readCPUClock reads the machine's CPU time.
func readCPUClock() cpuClock {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return cpuClock{}
	}
	st, err := fs.Stat()
	if err != nil {
		return cpuClock{}
	}
	c := st.CPUTotal
	return cpuClock{
		steal: c.Steal,
		total: c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal,
		ok:    true,
	}
}

// stolenShare says which share of the machine's CPU time between a and b
// its host took for others: on a shared virtual machine, runs whose
// shares differ are not measured on the same machine, whatever the code.
func stolenShare(a, b cpuClock) string {
	switch {
	case !a.ok || !b.ok:
		return "n/a (no /proc/stat)"
	case b.total <= a.total:
		return "n/a (no time between the readings)"
	}
	return fmt.Sprintf("%.1f%% of the CPU time", 100*(b.steal-a.steal)/(b.total-a.total))
}
