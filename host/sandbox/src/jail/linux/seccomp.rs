//! The system calls no tool needs, refused inside the jail as container
//! runtimes' default profiles refuse them: tracing other processes, kernel
//! keyrings, BPF, performance counters, mounting, new namespaces, loading
//! kernel modules, rebooting, setting the clock, and the file-handle calls
//! that open files by inode past any mount.

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};
use std::collections::BTreeMap;

/// Refused outright (EPERM).
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_syslog,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_fanotify_init,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
];

/// `clone` flags that make a new namespace.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// Terminal ioctls that push input into, or take over, another
/// process's terminal.
const DENIED_IOCTLS: &[libc::c_ulong] = &[libc::TIOCSTI, libc::TIOCLINUX];

/// Why a filter could not be built (an architecture seccompiler lacks).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter for {arch}: {reason}")]
pub struct SeccompError {
    arch: &'static str,
    reason: String,
}

/// The compiled programs, each as the bytes bubblewrap reads from a
/// descriptor (`--add-seccomp-fd`): the EPERM filter, then the filter that
/// answers `clone3` with ENOSYS (its flags sit in memory a filter cannot
/// read, so C libraries must fall back to `clone`, whose flags it can).
pub fn programs() -> Result<Vec<Vec<u8>>, SeccompError> {
    let arch = std::env::consts::ARCH;
    let fail = |reason: String| SeccompError { arch, reason };
    let target = arch.try_into().map_err(|e: seccompiler::BackendError| fail(e.to_string()))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let flag_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| masked(0, flag as u64))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    rules.insert(libc::SYS_clone, flag_rules);
    let ioctl_rules = DENIED_IOCTLS
        .iter()
        .map(|&request| equal(1, request))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target,
    )
    .map_err(|e| fail(e.to_string()))?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        target,
    )
    .map_err(|e| fail(e.to_string()))?;
    [eperm, clone3]
        .into_iter()
        .map(|filter| {
            let program: seccompiler::BpfProgram =
                filter.try_into().map_err(|e: seccompiler::BackendError| fail(e.to_string()))?;
            Ok(program
                .iter()
                .flat_map(|i| {
                    let mut bytes = Vec::with_capacity(8);
                    bytes.extend_from_slice(&i.code.to_ne_bytes());
                    bytes.push(i.jt);
                    bytes.push(i.jf);
                    bytes.extend_from_slice(&i.k.to_ne_bytes());
                    bytes
                })
                .collect())
        })
        .collect()
}

fn masked(arg: u8, flag: u64) -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(flag),
        flag,
    )?])
}

fn equal(arg: u8, value: u64) -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        value,
    )?])
}
