//! A userspace Intel 82599 (ixgbe) driver over VFIO that pushes received packets into net channels, with
//! RSS and Flow Director flow groups, plus a behavioural model of the NIC. Not written yet: this crate is
//! an empty placeholder until the driver issue lands.
