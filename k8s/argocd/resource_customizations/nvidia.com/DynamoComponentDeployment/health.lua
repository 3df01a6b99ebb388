-- Health of an NVIDIA Dynamo DynamoComponentDeployment (DCD).
--
-- Degraded: a container of the component is crash-looping, as a watcher such as crashwatch reports
-- it: the kstatus condition Stalled=True, or Available=False with reason ContainerCrashLooping.
-- Stalled=True counts even when the operator has since rewritten Available.
-- Healthy: Available=True for the current generation.
-- Progressing: anything else, including no status yet and an Available condition for an older
-- generation.
--
-- Written for Argo CD's Lua VM without the standard libraries: base and table functions only.

local hs = {}

local function conditionOf(status, conditionType)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, condition in ipairs(status.conditions) do
    if type(condition) == "table" and condition.type == conditionType then
      return condition
    end
  end
  return nil
end

local function messageOf(condition)
  if condition ~= nil and type(condition.message) == "string" and condition.message ~= "" then
    return condition.message
  end
  return nil
end

local status = obj.status
if type(status) ~= "table" then
  hs.status = "Progressing"
  hs.message = "Waiting for the component's status"
  return hs
end

local stalled = conditionOf(status, "Stalled")
local available = conditionOf(status, "Available")
local stalledTrue = stalled ~= nil and stalled.status == "True"
local availableCrashLooping = available ~= nil and available.status == "False"
  and available.reason == "ContainerCrashLooping"

if stalledTrue or availableCrashLooping then
  hs.status = "Degraded"
  local message = nil
  if stalledTrue then
    message = messageOf(stalled)
  end
  if message == nil and availableCrashLooping then
    message = messageOf(available)
  end
  hs.message = message or "A container is crash-looping"
  return hs
end

if available == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Available condition"
  return hs
end

-- The generation the condition speaks for: its own observedGeneration, else status.observedGeneration.
-- When neither is given, the condition is taken to be current.
local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
local observed = available.observedGeneration
if observed == nil then
  observed = status.observedGeneration
end
local behind = nil
if generation ~= nil and observed ~= nil and observed ~= generation then
  behind = "status is for generation " .. tostring(observed) .. ", the spec is at generation " .. tostring(generation)
end

if available.status == "True" and behind == nil then
  hs.status = "Healthy"
  hs.message = messageOf(available) or ""
  return hs
end

hs.status = "Progressing"
if available.status == "True" then
  hs.message = "Waiting for the operator: " .. behind
  return hs
end
local message = messageOf(available)
if message == nil then
  message = "Available is " .. tostring(available.status or "Unknown")
  if type(available.reason) == "string" and available.reason ~= "" then
    message = message .. ": " .. available.reason
  end
end
if behind ~= nil then
  message = message .. " (" .. behind .. ")"
end
hs.message = message
return hs
