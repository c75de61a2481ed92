-- Argo CD health check of kubetune Experiments (kubetune.io/v1alpha1). Paste this file into the
-- argocd-cm ConfigMap as resource.customizations.health.kubetune.io_Experiment (docs/operations.md,
-- "GitOps health"). Lua 5.1 with the base and table libraries only (Argo CD opens no string or math
-- library for a configured check); tests/unit/test_argocd_health.py runs it on an Experiment in each
-- phase and condition.
--
-- Healthy: Succeeded. Degraded: Failed; the spec refused (Ready=False, e.g. InvalidSpec); reconcile
-- passes failing (Degraded=True); trials that cannot go on (TrialsStalled=True, e.g. StorageUnreachable:
-- Healthy or Progressing again once they do). Suspended: spec.suspend. Progressing: Pending or Running, being
-- deleted, or a spec change the operator has not seen yet.
local hs = { status = "Progressing", message = "Waiting for the kubetune operator" }

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function explain(c, fallback)
  if c == nil then
    return fallback
  end
  local text = c.reason or fallback
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local function counts()
  local t = obj.status.trials
  if t == nil then
    return "no trials yet"
  end
  return (t.running or 0) .. " running, " .. (t.pending or 0) .. " pending, " .. (t.paused or 0) .. " paused, "
    .. (t.succeeded or 0) .. " succeeded, " .. (t.failed or 0) .. " failed of " .. (t.total or 0) .. " trials"
end

if obj.metadata.deletionTimestamp ~= nil then
  hs.message = "Being deleted: the operator stops its trials, then removes its finalizer"
  return hs
end
if obj.status == nil or obj.status.phase == nil then
  return hs
end

local phase = obj.status.phase
if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = explain(condition("Complete"), "Succeeded") .. " (" .. counts() .. ")"
  return hs
end
if phase == "Failed" then
  hs.status = "Degraded"
  hs.message = explain(condition("Failed"), "Failed") .. " (" .. counts() .. ")"
  return hs
end

local ready = condition("Ready")
if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = explain(ready, "NotReady")
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "The operator has not taken generation " .. generation .. " of the spec yet"
  return hs
end
local degraded = condition("Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = explain(degraded, "Degraded")
  return hs
end
local stalled = condition("TrialsStalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = explain(stalled, "TrialsStalled") .. " (" .. counts() .. ")"
  return hs
end
if phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = "spec.suspend is true (" .. counts() .. ")"
  return hs
end

hs.message = phase .. ": " .. counts()
local waiting = condition("TrialsWaiting")
if waiting ~= nil and waiting.status == "True" then
  hs.message = hs.message .. "; trials waiting, " .. explain(waiting, "TrialsWaiting")
end
return hs
