-- Argo CD health check for scorestream.dev/ModelServing
-- (argocd-cm: resource.customizations.health.scorestream.dev_ModelServing; see docs/gitops.md).
-- Reads what the operator writes (operator/status.py): status.observedGeneration, status.phase and
-- the conditions Ready, ModelReady, Progressing and Degraded. Lua 5.1 (Argo CD runs gopher-lua);
-- tested against statuses the operator computes by tests/test_argocd_health.py.
local hs = { status = "Progressing", message = "Waiting for the operator to report status" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end

local generation = obj.metadata.generation or 0
if (obj.status.observedGeneration or 0) < generation then
  hs.message = "Waiting for the operator to act on generation " .. generation
  return hs
end

local conditions = {}
for _, c in ipairs(obj.status.conditions) do
  conditions[c.type] = c
end
local function is(ctype, status)
  local c = conditions[ctype]
  return c ~= nil and c.status == status
end
local function say(ctype)
  local c = conditions[ctype]
  if c == nil then
    return ""
  end
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

-- Failed (its objects cannot be applied, or an invalid spec) and Degraded (crash-looping driver,
-- failed upgrade, unreachable topics or job) need someone to act.
if obj.status.phase == "Failed" or is("Degraded", "True") then
  return { status = "Degraded", message = say("Degraded") }
end
if obj.status.phase == "Suspended" then
  return { status = "Suspended", message = say("Ready") }
end
-- The model in spec.model was rejected or its canary/shadow failed: the operator does not retry
-- it until the spec changes, so waiting longer (Progressing) would never end.
local model = conditions["ModelReady"]
if model ~= nil and model.status == "False" and (model.reason == "RolledBack" or model.reason == "PublishFailed") then
  return { status = "Degraded", message = say("ModelReady") }
end
if not is("Ready", "True") then
  return { status = "Progressing", message = say("Ready") }
end
-- Ready, but a job upgrade rolls, or the desired model is still on its way or on trial.
if is("Progressing", "True") then
  return { status = "Progressing", message = say("Progressing") }
end
if model ~= nil and model.status ~= "True" then
  return { status = "Progressing", message = say("ModelReady") }
end
return { status = "Healthy", message = say("ModelReady") }
