"""Redfish payloads of a simulated BMC, shaped after the DMTF schemas (tests/fixtures/redfish_csdl).

A live service is not a mockup: no @Redfish.Copyright, and every property is one the schema of the
declared @odata.type version defines (tests check this against the CSDL files).
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, List

from fleet_lab.bmcsim.bmc_state import RESET_TYPES, Bmc, Job
from fleet_lab.bmcsim.vendors import PROFILE_ATTRIBUTE, PROFILE_UNLOCKED

ROOT = "/redfish/v1"


def uris(bmc: Bmc) -> Dict[str, str]:
    spec = bmc.spec
    system = f"{ROOT}/Systems/{spec.system_id}"
    manager = f"{ROOT}/Managers/{spec.manager_id}"
    return {
        "root": f"{ROOT}/",
        "systems": f"{ROOT}/Systems",
        "system": system,
        "reset": f"{system}/Actions/ComputerSystem.Reset",
        "bios": f"{system}/{spec.bios_path}",
        "settings": f"{system}/{spec.settings_path}",
        "clear_pending": f"{system}/{spec.settings_path}/Actions/Oem/DellManager.ClearPending",
        "managers": f"{ROOT}/Managers",
        "manager": manager,
        "jobs": f"{manager}/Jobs",
        "registries": f"{ROOT}/Registries",
        "registry_file": f"{ROOT}/Registries/{spec.registry_id}",
        "registry_json": f"{ROOT}/Registries/{spec.registry_id}/{spec.registry_id}.json",
        "session_service": f"{ROOT}/SessionService",
        "sessions": f"{ROOT}/SessionService/Sessions",
        "task_service": f"{ROOT}/TaskService",
        "tasks": f"{ROOT}/TaskService/Tasks",
        "task_monitors": f"{ROOT}/TaskService/TaskMonitors",
    }


def _uuid(bmc: Bmc, kind: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleet-lab/{bmc.name}/{kind}"))


def service_root(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    doc: Dict[str, Any] = {
        "@odata.id": u["root"],
        "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.6.0",
        "UUID": _uuid(bmc, "service"),
        "Vendor": bmc.spec.manufacturer.split()[0],
        "Product": bmc.spec.manager_model,
        "Systems": {"@odata.id": u["systems"]},
        "Managers": {"@odata.id": u["managers"]},
        "Registries": {"@odata.id": u["registries"]},
        "SessionService": {"@odata.id": u["session_service"]},
        "Tasks": {"@odata.id": u["task_service"]},
        "Links": {"Sessions": {"@odata.id": u["sessions"]}},
    }
    if bmc.faults.no_sessions:
        del doc["SessionService"], doc["Links"]
    if bmc.spec.oem_key:
        doc["Oem"] = {bmc.spec.oem_key: {"Manager": {"Model": bmc.spec.manager_model}}}
    return doc


def collection(odata_id: str, odata_type: str, name: str, members: List[str]) -> Dict[str, Any]:
    return {
        "@odata.id": odata_id,
        "@odata.type": odata_type,
        "Name": name,
        "Members": [{"@odata.id": m} for m in members],
        "Members@odata.count": len(members),
    }


def systems(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return collection(u["systems"], "#ComputerSystemCollection.ComputerSystemCollection",
                      "Computer System Collection", [u["system"]])


def system(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    spec = bmc.spec
    doc: Dict[str, Any] = {
        "@odata.id": u["system"],
        "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
        "Id": spec.system_id,
        "Name": "System",
        "SystemType": "Physical",
        "Manufacturer": spec.manufacturer,
        "Model": spec.model,
        "SerialNumber": f"SIM{bmc.port:06d}",
        "UUID": _uuid(bmc, "system"),
        "HostName": bmc.name,
        "PowerState": bmc.power_state,
        "BiosVersion": "1.9.1" if bmc.faults.undeclared_locks else "2.4.3",
        "Status": {"State": "Enabled", "Health": "OK"},
        "ProcessorSummary": {"Count": 2, "LogicalProcessorCount": 4},
        "MemorySummary": {"TotalSystemMemoryGiB": 0.75},
        "Bios": {"@odata.id": u["bios"]},
        "Links": {"ManagedBy": [{"@odata.id": u["manager"]}]},
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": u["reset"],
                "ResetType@Redfish.AllowableValues": list(RESET_TYPES),
            }
        },
    }
    if bmc.faults.no_reset_evidence:
        return doc
    doc["LastResetTime"] = bmc.last_reset_time
    if spec.post_state == "bootprogress":
        doc["BootProgress"] = {"LastState": bmc.boot_state, "LastStateTime": bmc.boot_state_time}
    elif spec.post_state == "hp":
        doc["Oem"] = {"Hp": {"PostState": bmc.post_state}}
    elif spec.post_state == "hpe":
        doc["Oem"] = {"Hpe": {"PostState": bmc.post_state}}
    return doc


def _settings_annotation(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return {
        "@odata.type": "#Settings.v1_3_0.Settings",
        "ETag": bmc.settings_etag,
        "Time": bmc.settings_time,
        "Messages": list(bmc.messages),
        "SettingsObject": {"@odata.id": u["settings"]},
    }


def _attributes_body(bmc: Bmc, attributes: Dict[str, str]) -> Dict[str, Any]:
    if bmc.spec.flat_body:
        return dict(attributes)
    return {"Attributes": dict(attributes)}


def bios(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    doc: Dict[str, Any] = {
        "@odata.id": u["bios"],
        "@odata.type": bmc.spec.bios_odata_type,
        "Id": "Bios",
        "Name": "BIOS Configuration Current Settings",
        "AttributeRegistry": bmc.spec.registry_id,
        "@Redfish.Settings": _settings_annotation(bmc),
        "Actions": {"#Bios.ResetBios": {"target": f"{u['bios']}/Actions/Bios.ResetBios"}},
    }
    doc.update(_attributes_body(bmc, bmc.bios_view()))
    return doc


def settings(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    doc: Dict[str, Any] = {
        "@odata.id": u["settings"],
        "@odata.type": bmc.spec.bios_odata_type,
        "@odata.etag": bmc.settings_etag,
        "Id": "Settings",
        "Name": "BIOS Configuration Pending Settings",
        "AttributeRegistry": bmc.spec.registry_id,
    }
    if bmc.spec.supports_apply_time:
        doc["@Redfish.SettingsApplyTime"] = {
            "@odata.type": "#Settings.v1_3_0.PreferredApplyTime",
            "ApplyTime": "OnReset",
            "ApplyTime@Redfish.AllowableValues": ["OnReset"],
        }
    if bmc.spec.key.startswith("dell"):
        doc["Actions"] = {"Oem": {"#DellManager.ClearPending": {"target": u["clear_pending"]}}}
    doc.update(_attributes_body(bmc, bmc.settings_view()))
    return doc


def registries(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    kind = "#MessageRegistryFileCollection.MessageRegistryFileCollection"
    return collection(u["registries"], kind, "Registry File Collection", [u["registry_file"]])


def registry_file(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return {
        "@odata.id": u["registry_file"],
        "@odata.type": "#MessageRegistryFile.v1_1_0.MessageRegistryFile",
        "Id": bmc.spec.registry_id,
        "Name": "BIOS Attribute Registry File",
        "Registry": bmc.spec.registry_id,
        "Languages": ["en"],
        "Location": [{"Language": "en", "Uri": u["registry_json"]}],
    }


def attribute_registry(bmc: Bmc) -> Dict[str, Any]:
    entries = []
    for order, attr in enumerate(bmc.spec.attributes):
        entries.append({
            "AttributeName": attr.name,
            "DisplayName": attr.display_name,
            "DisplayOrder": order,
            "HelpText": attr.display_name,
            "MenuPath": "./ProcessorSettings",
            "Type": "Enumeration",
            "ReadOnly": attr.read_only,
            "GrayOut": attr.gray_out,
            "Hidden": False,
            "ResetRequired": True,
            "Value": [{"ValueName": v, "ValueDisplayName": d} for v, d in attr.values],
            "CurrentValue": None,
        })
    dependencies = []
    if not bmc.faults.undeclared_locks:
        for name in bmc.spec.profile_locks:
            dependencies.append({
                "DependencyFor": name, "Type": "Map",
                "Dependency": {
                    "MapFrom": [{"MapFromAttribute": PROFILE_ATTRIBUTE, "MapFromCondition": "NEQ",
                                 "MapFromProperty": "CurrentValue",
                                 "MapFromValue": PROFILE_UNLOCKED}],
                    "MapToAttribute": name, "MapToProperty": "ReadOnly", "MapToValue": True}})
    return {
        "@odata.id": uris(bmc)["registry_json"],
        "@odata.type": "#AttributeRegistry.v1_3_0.AttributeRegistry",
        "Id": bmc.spec.registry_id,
        "Name": "BIOS Attribute Registry",
        "Language": "en",
        "OwningEntity": bmc.spec.manufacturer,
        "RegistryVersion": "1.0.0",
        "SupportedSystems": [{"ProductName": bmc.spec.model, "SystemId": bmc.spec.system_id}],
        "RegistryEntries": {"Attributes": entries, "Dependencies": dependencies},
    }


def managers(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return collection(u["managers"], "#ManagerCollection.ManagerCollection", "Manager Collection",
                      [u["manager"]])


def manager(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    doc: Dict[str, Any] = {
        "@odata.id": u["manager"],
        "@odata.type": "#Manager.v1_5_0.Manager",
        "Id": bmc.spec.manager_id,
        "Name": "Manager",
        "ManagerType": "BMC",
        "Model": bmc.spec.manager_model,
        "FirmwareVersion": bmc.spec.firmware,
        "UUID": _uuid(bmc, "manager"),
        "Status": {"State": "Enabled", "Health": "OK"},
        "Links": {"ManagerForServers": [{"@odata.id": u["system"]}]},
    }
    if bmc.spec.commit.startswith("job"):
        doc["Oem"] = {"Dell": {"Jobs": {"@odata.id": u["jobs"]}}}
    return doc


def jobs(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return collection(u["jobs"], "#DellJobCollection.DellJobCollection", "JobQueue",
                      [f"{u['jobs']}/{j}" for j in bmc.jobs])


def job(bmc: Bmc, item: Job) -> Dict[str, Any]:
    return {
        "@odata.id": f"{uris(bmc)['jobs']}/{item.id}",
        "@odata.type": "#DellJob.v1_0_2.DellJob",
        "Id": item.id,
        "Name": "Configure: BIOS.Setup.1-1",
        "JobType": "BIOSConfiguration",
        "JobState": item.state,
        "Message": item.message,
        "PercentComplete": item.percent,
        "StartTime": item.created,
        "TargetSettingsURI": item.target,
    }


def session_service(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return {
        "@odata.id": u["session_service"],
        "@odata.type": "#SessionService.v1_1_8.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": True,
        "SessionTimeout": 1800,
        "Sessions": {"@odata.id": u["sessions"]},
    }


def sessions(bmc: Bmc) -> Dict[str, Any]:
    u = uris(bmc)
    return collection(u["sessions"], "#SessionCollection.SessionCollection", "Session Collection",
                      [f"{u['sessions']}/{s}" for s in bmc.sessions])


def session(bmc: Bmc, session_id: str) -> Dict[str, Any]:
    return {
        "@odata.id": f"{uris(bmc)['sessions']}/{session_id}",
        "@odata.type": "#Session.v1_0_0.Session",
        "Id": session_id,
        "Name": "User Session",
        "UserName": bmc.username,
    }


def task(bmc: Bmc, task_id: str, done: bool) -> Dict[str, Any]:
    return {
        "@odata.id": f"{uris(bmc)['tasks']}/{task_id}",
        "@odata.type": "#Task.v1_4_0.Task",
        "Id": task_id,
        "Name": "BIOS settings update",
        "TaskState": "Completed" if done else "Running",
        "TaskStatus": "OK",
        "TaskMonitor": f"{uris(bmc)['task_monitors']}/{task_id}",
    }


def error(status: int, message_id: str, message: str, related: List[str]) -> Dict[str, Any]:
    info: Dict[str, Any] = {
        "@odata.type": "#Message.v1_1_0.Message",
        "MessageId": message_id,
        "Message": message,
        "Severity": "Warning" if status < 500 else "Critical",
        "Resolution": "Correct the request and resubmit it.",
    }
    if related:
        info["RelatedProperties"] = related
    return {"error": {"code": message_id, "message": message, "@Message.ExtendedInfo": [info]}}
