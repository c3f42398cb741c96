"""The `vm` lab backend: lab servers as QEMU guests booted from a cached Debian initramfs.

model    the drop model (receive rate per BIOS settings), pure, shared with the `sim` backend
image    the guest image builder (debootstrap + cloud kernel + our init), cached
persist  the per-VM persistent disk (/persist: sysctl.d, /etc/default/grub, the drain flag)
qemu     QEMU command lines, KVM-or-TCG detection
backend  VmBackend (the HostBackend) and cleanup of a lab state directory
"""
from fleet_lab.vm.drop_model import receive_rate

__all__ = ["receive_rate"]
