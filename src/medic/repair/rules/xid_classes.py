"""NVIDIA Xid codes (Ampere and newer) with their mnemonic, meaning and action class.

Data only. Source: ``shared/reference/xid-catalog.md`` §3–§4 (NVIDIA Xid Catalog, 2025-10-29
copy): each code's *immediate* resolution bucket reduced to the action-class ladder of §3:

==================  =========================================================================
class               buckets
==================  =========================================================================
``none``            IGNORE, sympathetic buckets, CHECK_UVM (no vGPU/UVM on training nodes), the
                    XID_154 row itself (its printed action decides, see :mod:`.lightest`)
``restart_app``     RESTART_APP, CHECK_APP/CUDA: the node is fine, the job restarts
``reset_gpu``       RESET_GPU, WORKFLOW_XID_48 (solo), WORKFLOW_NVLINK_ERR and the NVLink5
                    workflow for 144–146/149/150 ("mostly reset GPU"; 147/148 decode to IGNORE)
``drain_reset``     WORKFLOW_XID_48 with 63/64 (set by attribution, not by this table)
``reboot``          RESTART_BM, RESTART_VM
``update_firmware`` UPDATE_SWFW (Xid 78)
``escalate``        CONTACT_SUPPORT, CHECK_MECHANICALS: drain, then a person (support / RMA)
==================  =========================================================================

Codes 162–172 have no published bucket; they follow the catalog's suggested handling (171/172
as Xid 48, 169 as 62, 167 reboot, 166 reboot as gpud does, 164/165/168 escalate, the rest none),
which is also what the signature catalogue (``detect/catalogue/xid.yaml``) says. A code missing
here is unknown: no action (NVSentinel's default for unknown codes is CONTACT_SUPPORT, i.e. a
person looks at it; medic lists it as an unmapped alert).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["XID_CLASSES", "XidClass"]


class XidClass(NamedTuple):
    code: int
    action_class: str
    mnemonic: str
    meaning: str


# code | action class | mnemonic | meaning
_TABLE = """
8|restart_app|ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT|GPU stopped processing
11|restart_app|ROBUST_CHANNEL_GR_ERROR_MISSING_HW|Invalid or corrupted push buffer stream
13|restart_app|ROBUST_CHANNEL_GR_EXCEPTION|Graphics Engine Exception
14|none|ROBUST_CHANNEL_FAKE_ERROR|Unused
25|restart_app|ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY|Invalid or illegal push buffer stream
31|restart_app|ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT|GPU memory page fault
32|restart_app|ROBUST_CHANNEL_PBDMA_ERROR|Invalid or corrupted push buffer stream
37|none|ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD|Driver firmware error
38|none|ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT|Driver firmware error
39|restart_app|ROBUST_CHANNEL_CE0_ERROR|Copy Engine Exception
40|restart_app|ROBUST_CHANNEL_CE1_ERROR|Copy Engine Exception
41|restart_app|ROBUST_CHANNEL_CE2_ERROR|Copy Engine Exception
43|none|ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR|GPU stopped processing
44|none|ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW|Graphics Engine fault during context switch
45|none|ROBUST_CHANNEL_PREEMPTIVE_REMOVAL|Preemptive cleanup due to previous errors
46|reset_gpu|ROBUST_CHANNEL_GPU_TIMEOUT_ERROR|GPU stopped processing
48|reset_gpu|ROBUST_CHANNEL_GPU_ECC_DBE|Double Bit ECC Error
54|escalate|SILENT_RUNNING_PWR_REDUCED_CLOCKING|Auxiliary power is not connected to the GPU board
60|restart_app|ROBUST_CHANNEL_SEC2_ERROR|Video processor exception
62|reset_gpu|PMU_HALT_ERROR|Internal micro-controller halt
63|none|INFOROM_DRAM_RETIREMENT_EVENT|GPU memory remapping event
64|reset_gpu|INFOROM_DRAM_RETIREMENT_FAILURE|GPU memory remapping failure
66|none|ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION|Illegal access by driver
67|none|ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION|Illegal access by driver
68|restart_app|ROBUST_CHANNEL_NVDEC0_ERROR|NVDEC0 Exception
69|restart_app|ROBUST_CHANNEL_GR_CLASS_ERROR|Graphics Engine class error
70|restart_app|ROBUST_CHANNEL_CE3_ERROR|CE3: Unknown Error
71|restart_app|ROBUST_CHANNEL_CE4_ERROR|CE4: Unknown Error
72|restart_app|ROBUST_CHANNEL_CE5_ERROR|CE5: Unknown Error
74|reset_gpu|NVLINK_ERROR|NVLink Error
75|restart_app|ROBUST_CHANNEL_CE6_ERROR|CE6: Unknown Error
76|restart_app|ROBUST_CHANNEL_CE7_ERROR|CE7: Unknown Error
77|restart_app|ROBUST_CHANNEL_CE8_ERROR|CE8: Unknown Error
78|update_firmware|VGPU_START_ERROR|vGPU Start Error
79|reboot|ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS|GPU has fallen off the bus
80|restart_app|PBDMA_PUSHBUFFER_CRC_MISMATCH|Corrupted data sent to GPU
82|restart_app|ROBUST_CHANNEL_NVJPG0_ERROR|NVJPG0 Error
83|restart_app|ROBUST_CHANNEL_NVDEC1_ERROR|NVDEC1 Error
84|restart_app|ROBUST_CHANNEL_NVDEC2_ERROR|NVDEC2 Error
85|restart_app|ROBUST_CHANNEL_CE9_ERROR|CE9: Unknown Error
86|restart_app|ROBUST_CHANNEL_OFA0_ERROR|OFA Exception
88|restart_app|ROBUST_CHANNEL_NVDEC3_ERROR|NVDEC3 Error
89|restart_app|ROBUST_CHANNEL_NVDEC4_ERROR|NVDEC4 Error
92|none|EXCESSIVE_SBE_INTERRUPTS|High single-bit ECC error rate
93|none|INFOROM_ERASE_LIMIT_EXCEEDED|Non-fatal violation of provisioned InfoROM wear limit
94|restart_app|ROBUST_CHANNEL_CONTAINED_ERROR|Contained memory error
95|reset_gpu|ROBUST_CHANNEL_UNCONTAINED_ERROR|Uncontained memory error
96|restart_app|ROBUST_CHANNEL_NVDEC5_ERROR|NVDEC5 Error
97|restart_app|ROBUST_CHANNEL_NVDEC6_ERROR|NVDEC6 Error
98|restart_app|ROBUST_CHANNEL_NVDEC7_ERROR|NVDEC7 Error
99|restart_app|ROBUST_CHANNEL_NVJPG1_ERROR|NVJPG1 Error
100|restart_app|ROBUST_CHANNEL_NVJPG2_ERROR|NVJPG2 Error
101|restart_app|ROBUST_CHANNEL_NVJPG3_ERROR|NVJPG3 Error
102|restart_app|ROBUST_CHANNEL_NVJPG4_ERROR|NVJPG4 Error
103|restart_app|ROBUST_CHANNEL_NVJPG5_ERROR|NVJPG5 Error
104|restart_app|ROBUST_CHANNEL_NVJPG6_ERROR|NVJPG6 Error
105|restart_app|ROBUST_CHANNEL_NVJPG7_ERROR|NVJPG7 Error
106|none|SMBPBI_TEST_MESSAGE|SMBPBI Test Message
107|none|SMBPBI_TEST_MESSAGE_SILENT|SMBPBI Test Message Silent
108|none|NVLINK_REMOTE_TRANSLATION_ERROR|Unused
109|reset_gpu|ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR|Context Switch Timeout Error
110|reset_gpu|SEC_FAULT_ERROR|Security Fault Error
119|reset_gpu|GSP_RPC_TIMEOUT|GSP RPC Timeout
120|reset_gpu|GSP_ERROR|GSP Error
121|none|C2C_ERROR|C2C Error
126|restart_app|ROBUST_CHANNEL_CE10_ERROR|CE10: Unknown Error
127|restart_app|ROBUST_CHANNEL_CE11_ERROR|CE11: Unknown Error
128|restart_app|ROBUST_CHANNEL_CE12_ERROR|CE12: Unknown Error
129|restart_app|ROBUST_CHANNEL_CE13_ERROR|CE13: Unknown Error
130|restart_app|ROBUST_CHANNEL_CE14_ERROR|CE14: Unknown Error
131|restart_app|ROBUST_CHANNEL_CE15_ERROR|CE15: Unknown Error
132|restart_app|ROBUST_CHANNEL_CE16_ERROR|CE16: Unknown Error
133|restart_app|ROBUST_CHANNEL_CE17_ERROR|CE17: Unknown Error
134|restart_app|ROBUST_CHANNEL_CE18_ERROR|CE18: Unknown Error
135|restart_app|ROBUST_CHANNEL_CE19_ERROR|CE19: Unknown Error
136|reset_gpu|ALI_TRAINING_FAIL|Link Training Failed
137|none|NVLINK_PRIV_ERR|NVLink Privilege Error
139|restart_app|ROBUST_CHANNEL_OFA1_ERROR|OFA1 Error
140|reset_gpu|UNRECOVERABLE_ECC_ERROR_ESCAPE|ECC Unrecovered Error
141|none|ROBUST_CHANNEL_FAST_PATH_ERROR|CUDA Fast Path Error
142|escalate|ROBUST_CHANNEL_NVENC3_ERROR|NVENC3 Error
143|reset_gpu|GPU_INIT_ERROR|GPU Initialization Error
144|reset_gpu|NVLINK_SAW_ERROR|NVLINK: SAW Error
145|reset_gpu|NVLINK_RLW_ERROR|NVLINK: RLW Error
146|reset_gpu|NVLINK_TLW_ERROR|NVLINK: TLW Error
147|none|NVLINK_TREX_ERROR|NVLINK: TREX Error
148|none|NVLINK_NVLPW_CTRL_ERROR|NVLINK: NVLPW_CTRL Error
149|reset_gpu|NVLINK_NETIR_ERROR|NVLINK: NETIR Error
150|reset_gpu|NVLINK_MSE_ERROR|NVLINK: MSE Error
151|reboot|ROBUST_CHANNEL_KEY_ROTATION_ERROR|Key rotation Error
152|none|ROBUST_CHANNEL_DLA_SMMU_ERROR|DLA SMMU Error
153|none|ROBUST_CHANNEL_DLA_TIMEOUT|DLA timeout Error
154|none|GPU_RECOVERY_ACTION_CHANGED|GPU Recovery Action Changed
155|reset_gpu|NVLINK_SW_DEFINED_ERROR|NVLINK: SW Defined Error
156|reset_gpu|RESOURCE_RETIREMENT_EVENT|Resource Retirement Event
157|none|RESOURCE_RETIREMENT_FAILURE|Resource Retirement Failure
158|reset_gpu|GPU_FATAL_TIMEOUT|GPU Fatal Timeout
159|none|ROBUST_CHANNEL_CHI_NON_DATA_ERROR|CHI Non-Data Error
160|none|CHANNEL_RETIREMENT_EVENT|Channel Retirement Event
161|none|CHANNEL_RETIREMENT_FAILURE|Channel Retirement Failure
162|none|PSHC_REENGAGED|Power Smoothing HW Circuitry capability reengaged
163|none|PSHC_DISENGAGED|Power Smoothing HW Circuitry capability disengaged
164|escalate|PSHC_LOW_LIFETIME|Power Smoothing HW Circuitry low lifetime reached
165|escalate|PSHC_ZERO_LIFETIME|Power Smoothing HW Circuitry lifetime exhausted
166|reboot|NVLINK_SECURE_CRYPTO_ERR|Confidential-computing NVLink traffic before encryption
167|reboot|PCIE_FATAL_TIMEOUT|PCIe fatal timeout
168|escalate|REDUCED_GPU_MEMORY_CAPACITY|Errors found in WPR (write protected region)
169|reset_gpu|SEC2_HALT_ERROR|Internal micro-controller halt
170|none|NVLINK_SECURE_OTHER|Interrupt seen in confidential-computing mode
171|reset_gpu|UNCORRECTABLE_DRAM_ERROR|Uncorrectable DRAM fault (supplements Xid 48)
172|reset_gpu|UNCORRECTABLE_SRAM_ERROR|Uncorrectable SRAM fault (supplements Xid 48)
"""


def _parse(table: str) -> dict[int, XidClass]:
    rows: dict[int, XidClass] = {}
    for line in table.strip().splitlines():
        code, action_class, mnemonic, meaning = line.split("|")
        rows[int(code)] = XidClass(int(code), action_class, mnemonic, meaning)
    return rows


XID_CLASSES: dict[int, XidClass] = _parse(_TABLE)
"""Xid code -> its row; codes not listed are unknown (no action)."""
