package masterelection

import (
	"context"

	"github.com/herdkit/herd/registry"
)

// openRegistryOrErr returns the registry, or ErrNoRegistry before Start and
// in standalone mode.
func (m *MasterElection) openRegistryOrErr() (*registry.Registry, error) {
	if r := m.Registry(); r != nil {
		return r, nil
	}
	return nil, ErrNoRegistry
}

// RegisterProcess writes info into the registry (the specification's
// registerProcess). herd registers this process by itself; use this for
// processes herd does not run.
func (m *MasterElection) RegisterProcess(ctx context.Context, info registry.ProcessInfo) error {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return err
	}
	return r.Register(ctx, info)
}

// UpdateProcessHeartbeat renews the registry entry of a process registered
// with RegisterProcess (the specification's updateProcessHeartbeat).
func (m *MasterElection) UpdateProcessHeartbeat(ctx context.Context, processID string) error {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return err
	}
	return r.Heartbeat(ctx, processID)
}

// UnregisterProcess removes a process from the registry (the
// specification's unregisterProcess).
func (m *MasterElection) UnregisterProcess(ctx context.Context, processID string) error {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return err
	}
	return r.Unregister(ctx, processID)
}

// Processes returns every live process (the specification's getAllProcesses).
func (m *MasterElection) Processes(ctx context.Context) ([]registry.ProcessInfo, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return nil, err
	}
	return r.Processes(ctx)
}

// Process returns the live process processID, or registry.ErrNotFound.
func (m *MasterElection) Process(ctx context.Context, processID string) (registry.ProcessInfo, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return registry.ProcessInfo{}, err
	}
	return r.Process(ctx, processID)
}

// ProcessesByRole returns the live processes with role (the specification's
// getProcessesByRole).
func (m *MasterElection) ProcessesByRole(ctx context.Context, role registry.Role) ([]registry.ProcessInfo, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return nil, err
	}
	return r.ProcessesByRole(ctx, role)
}

// MasterProcess returns the master's info (the specification's
// getMasterProcess), or registry.ErrNotFound when there is no master.
func (m *MasterElection) MasterProcess(ctx context.Context) (registry.ProcessInfo, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return registry.ProcessInfo{}, err
	}
	return r.MasterProcess(ctx)
}

// Slaves returns every live slave (the specification's getSlaves).
func (m *MasterElection) Slaves(ctx context.Context) ([]registry.SlaveNode, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return nil, err
	}
	return r.Slaves(ctx)
}

// Slave returns the live slave nodeID (the specification's getSlave), or
// registry.ErrNotFound.
func (m *MasterElection) Slave(ctx context.Context, nodeID string) (registry.SlaveNode, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return registry.SlaveNode{}, err
	}
	return r.Slave(ctx, nodeID)
}

// SlaveCount returns the number of live slaves (the specification's getSlaveCount).
func (m *MasterElection) SlaveCount(ctx context.Context) (int, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return 0, err
	}
	return r.SlaveCount(ctx)
}

// ProcessChannel returns the routing channel of the live process processID
// (the specification's getProcessChannel).
func (m *MasterElection) ProcessChannel(ctx context.Context, processID string) (string, error) {
	r, err := m.openRegistryOrErr()
	if err != nil {
		return "", err
	}
	return r.ProcessChannel(ctx, processID)
}
