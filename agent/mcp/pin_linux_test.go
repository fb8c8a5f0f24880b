package mcp

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// pinPair picks the first two cores this process may run on, pins every
// thread of this process to the second (new threads inherit the mask of
// the thread that makes them) and sets GOMAXPROCS to 1, as `taskset -c
// CPU` would have at the start, and returns the first, for the server;
// restore undoes both. ok is false when there are not two cores or the
// mask cannot be set.
func pinPair() (server int, restore func(), ok bool) {
	var all, one [16]uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(all), uintptr(unsafe.Pointer(&all))); e != 0 {
		return 0, nil, false
	}
	var cpus []int
	for cpu := 0; cpu < len(all)*64 && len(cpus) < 2; cpu++ {
		if all[cpu/64]&(1<<(cpu%64)) != 0 {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		return 0, nil, false
	}
	one[cpus[1]/64] = 1 << (cpus[1] % 64)
	if !setAffinity(&one) {
		setAffinity(&all)
		return 0, nil, false
	}
	runtime.GOMAXPROCS(1)
	return cpus[0], func() {
		setAffinity(&all)
		runtime.SetDefaultGOMAXPROCS()
	}, true
}

// setAffinity sets mask on every thread of this process, twice over, so
// that a thread made during the first pass by one not yet set is set by
// the second.
func setAffinity(mask *[16]uint64) bool {
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return false
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(*mask), uintptr(unsafe.Pointer(mask)))
			if errno != 0 && errno != syscall.ESRCH {
				return false
			}
		}
	}
	return true
}
